"""An MCP tool's image result reaches an Anthropic model as an image block in its tool_result,
not as base64 inside JSON text."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from support.tiers import skip_without

import nbdurable as nd
from nbdurable.models._anthropic_wire import to_messages

skip_without("anthropic")

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 8).decode()
BLOCKS = [  # what nbdurable.mcp makes of a CallToolResult of a text and an image
    {"type": "text", "text": "a red dot"},
    {"type": "image", "data": PNG, "mimeType": "image/png"},
]


def history(result: object) -> list[nd.Message]:
    call = nd.ToolCallPart(tool_call_id="c1", tool_name="pictures", args={})
    done = nd.ToolResultPart(tool_call_id="c1", tool_name="pictures", result=result)
    return [nd.user("Show me."), nd.Message(role="assistant", content=[call]),
            nd.Message(role="tool", content=[done])]  # fmt: skip


def test_an_image_result_is_an_image_block_of_the_tool_result() -> None:
    [_, _, turn] = to_messages(history(BLOCKS))
    [block] = turn["content"]
    assert block["type"] == "tool_result" and block["tool_use_id"] == "c1"
    assert block["content"] == [
        {"type": "text", "text": "a red dot"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]


@pytest.mark.parametrize(
    "result",
    [
        [{"type": "text", "text": "only text"}],
        [{"type": "resource", "uri": "file:///x"}, BLOCKS[1]],
        {"type": "image", "data": PNG},
        [1, 2],
    ],
)
def test_other_results_stay_json_text(result: object) -> None:
    [_, _, turn] = to_messages(history(result))
    assert isinstance(turn["content"][0]["content"], str)


async def test_an_mcp_servers_picture_reaches_the_model_as_an_image(stdio_server: Any) -> None:
    from models.anthropic_server import AnthropicServer, message, text, tool_use

    from nbdurable.models._anthropic import AnthropicModel

    api = AnthropicServer().start()
    api.add(
        message(tool_use("toolu_1", "pictures"), stop_reason="tool_use"),
        message(text("A red dot.")),
    )
    model = AnthropicModel("claude-sonnet-4-5", api_key="sk-ant-test", base_url=api.url)
    try:
        tools = await stdio_server.tools(include="pictures", approval={"pictures": False})
        result = await nd.generate_text(model=model, messages="Show me.", tools=tools)
    finally:
        await stdio_server.close()
        await model.aclose()
        api.stop()
    assert result.text == "A red dot."
    [block] = api.requests[1]["messages"][-1]["content"]
    assert block["type"] == "tool_result"
    kinds = [b["type"] for b in block["content"]]
    assert kinds == ["text", "image"]
    assert block["content"][1]["source"]["media_type"] == "image/png"
