"""An MCP tool's picture reaches OpenAI models as an image, not as base64 inside JSON text.

Chat Completions (``OpenAIChatModel``): a ``tool`` message holds text only, so the
result's text goes there and its pictures follow the turn's tool messages as
``image_url`` parts of a user message. The Responses API (Pydantic AI's
``OpenAIResponsesModel`` through ``PydanticAIModel``): ``input_image`` parts of the
``function_call_output``. Both against the official SDK over a loopback server,
with the MCP Python SDK's own stdio server.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

pytest.importorskip("openai")

import nbdurable as nd
from nbdurable.models import ModelRequest, OpenAIChatModel
from nbdurable.models._openai_wire import request_messages

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 8).decode()
BLOCKS = [  # what nbdurable.mcp makes of a CallToolResult of a text and an image
    {"type": "text", "text": "a red dot"},
    {"type": "image", "data": PNG, "mimeType": "image/png"},
]


def history(*results: Any, is_error: bool = False) -> list[nd.Message]:
    calls = [
        nd.ToolCallPart(tool_call_id=f"c{i}", tool_name="pictures", args={})
        for i in range(len(results))
    ]
    done = [
        nd.ToolResultPart(
            tool_call_id=f"c{i}", tool_name="pictures", result=result, is_error=is_error
        )
        for i, result in enumerate(results)
    ]
    return [
        nd.user("Show me."),
        nd.Message(role="assistant", content=calls),
        nd.Message(role="tool", content=done),
    ]


def test_the_pictures_follow_the_tool_messages_as_image_parts() -> None:
    sent = request_messages(ModelRequest(messages=history(BLOCKS, "plain")))
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    first, second, pictures = sent[2:]
    assert first["tool_call_id"] == "c0" and first["content"].startswith("a red dot\n")
    assert "1 image" in first["content"] and PNG not in first["content"]
    assert second == {"role": "tool", "tool_call_id": "c1", "content": "plain"}
    assert pictures["content"] == [
        {"type": "text", "text": "The 1 image of the result of tool call c0 (pictures):"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]


def test_an_error_result_keeps_its_prefix_and_other_results_stay_json_text() -> None:
    [*_, tool, _pictures] = request_messages(ModelRequest(messages=history(BLOCKS, is_error=True)))
    assert tool["content"].startswith("Error: a red dot")
    for result in ([{"type": "text", "text": "only text"}], [{"type": "resource"}, BLOCKS[1]]):
        sent = request_messages(ModelRequest(messages=history(result)))
        assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    # a model that takes no images reads them as JSON text, as before
    sent = request_messages(ModelRequest(messages=history(BLOCKS)), result_images=False)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert json.loads(sent[-1]["content"]) == BLOCKS


async def test_an_mcp_picture_reaches_a_chat_completions_model_as_an_image(
    stdio_server: Any,
) -> None:
    from models.openai_server import OpenAIServer, Reply, completion, text_reply, usage

    call = {"id": "call_1", "type": "function", "function": {"name": "pictures", "arguments": "{}"}}
    ask = Reply(completion({"content": None, "tool_calls": [call]}, "tool_calls", usage(9, 3)), [])
    with OpenAIServer([ask, text_reply("A red dot.")]) as api:
        model = OpenAIChatModel("gpt-4o-mini", base_url=api.url, api_key=api.api_key)
        try:
            tools = await stdio_server.tools(include="pictures", approval={"pictures": False})
            result = await nd.generate_text(model=model, messages="Show me.", tools=tools)
        finally:
            await stdio_server.close()
            await model.aclose()
    assert result.text == "A red dot."
    *_, tool, pictures = api.requests[1]["messages"]
    assert tool["role"] == "tool" and tool["content"].startswith("a red dot")
    assert pictures["role"] == "user"
    [image] = [p for p in pictures["content"] if p["type"] == "image_url"]
    assert image["image_url"]["url"].startswith("data:image/png;base64,")


async def test_an_mcp_picture_reaches_a_responses_model_as_an_input_image(
    stdio_server: Any,
) -> None:
    pytest.importorskip("pydantic_ai")
    from models.openai_server import OpenAIServer, Reply
    from openai.types.responses import (
        Response,
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from nbdurable.models import PydanticAIModel

    def turn(item: Any) -> Reply:
        response = Response(id="resp_1", created_at=1_727_000_000, model="gpt-4.1-mini",
                            object="response", output=[item], parallel_tool_calls=True,
                            tool_choice="auto", tools=[], status="completed")  # fmt: skip
        return Reply(response.model_dump(mode="json", exclude_none=True), [])

    ask = turn(ResponseFunctionToolCall(type="function_call", id="fc_1", call_id="call_1",
                                        name="pictures", arguments="{}", status="completed"))  # fmt: skip
    text = ResponseOutputText(type="output_text", text="A red dot.", annotations=[])
    answer = turn(ResponseOutputMessage(type="message", id="msg_1", role="assistant",
                                        status="completed", content=[text]))  # fmt: skip
    with OpenAIServer([ask, answer]) as api:
        provider = OpenAIProvider(base_url=api.url, api_key=api.api_key)
        model = PydanticAIModel(OpenAIResponsesModel("gpt-4.1-mini", provider=provider))
        try:
            tools = await stdio_server.tools(include="pictures", approval={"pictures": False})
            result = await nd.generate_text(model=model, messages="Show me.", tools=tools)
        finally:
            await stdio_server.close()
    assert result.text == "A red dot."
    [output] = [i for i in api.requests[1]["input"] if i.get("type") == "function_call_output"]
    assert output["call_id"] == "call_1"
    kinds = [part["type"] for part in output["output"]]
    assert kinds == ["input_text", "input_image"]
    assert output["output"][1]["image_url"].startswith("data:image/png;base64,")
