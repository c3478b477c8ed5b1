"""An MCP tool's picture reaches a LangChain chat model as an image, not as base64 in JSON.

``LangChainModel`` puts a result's pictures where the provider takes them:
standard image blocks inside the ``ToolMessage`` (which LangChain's Anthropic,
Google and OpenAI Responses integrations send as images), or, for OpenAI's Chat
Completions (a ``tool`` message holds text only), its text there and the pictures
in a ``HumanMessage`` after the turn's tool messages. Real langchain-core
messages, and ``ChatOpenAI`` over the wire to a loopback server on both OpenAI
APIs with the MCP Python SDK's own stdio server.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

import nbdurable as nd
from nbdurable._errors import ConfigurationError
from nbdurable.models import LangChainModel, ModelRequest
from nbdurable.models._langchain_wire import load, messages_of

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 8).decode()
BLOCKS = [  # what nbdurable.mcp makes of a CallToolResult of a text and an image
    {"type": "text", "text": "a red dot"},
    {"type": "image", "data": PNG, "mimeType": "image/png"},
]


def request(*results: Any, is_error: bool = False) -> ModelRequest:
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
    return ModelRequest(
        messages=[
            nd.user("Show me."),
            nd.Message(role="assistant", content=calls),
            nd.Message(role="tool", content=done),
        ]
    )


def test_in_the_tool_message_the_pictures_are_standard_image_blocks() -> None:
    sent = messages_of(request(BLOCKS, "plain"), load("test"), "tool")
    assert [type(m) for m in sent] == [HumanMessage, AIMessage, ToolMessage, ToolMessage]
    assert sent[2].content == [
        {"type": "text", "text": "a red dot"},
        {"type": "image", "base64": PNG, "mime_type": "image/png"},
    ]
    assert sent[3].content == "plain"
    [*_, error] = messages_of(request(BLOCKS, is_error=True), load("test"), "tool")
    assert error.content[0] == {"type": "text", "text": "Error:"} and error.status == "error"


def test_in_a_message_after_the_pictures_follow_the_tool_messages() -> None:
    sent = messages_of(request(BLOCKS, "plain"), load("test"), "message")
    assert [type(m) for m in sent] == [
        HumanMessage,
        AIMessage,
        ToolMessage,
        ToolMessage,
        HumanMessage,
    ]
    assert sent[2].content.startswith("a red dot\n") and PNG not in sent[2].content
    assert "1 image" in sent[2].content
    assert sent[4].content == [
        {"type": "text", "text": "The 1 image of the result of tool call c0 (pictures):"},
        {"type": "image", "base64": PNG, "mime_type": "image/png"},
    ]
    # as text, for a model that takes no images: the blocks as JSON, as before
    [*_, tool] = messages_of(request(BLOCKS), load("test"), "text")
    assert json.loads(tool.content) == BLOCKS


def test_where_the_pictures_go_follows_the_provider_unless_told() -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    fake = FakeMessagesListChatModel(responses=[AIMessage(content="ok")])
    assert LangChainModel(fake).result_images == "tool"
    assert LangChainModel(fake, result_images="text").result_images == "text"
    chat = langchain_openai.ChatOpenAI(model="gpt-4o-mini", api_key="sk-test")
    assert LangChainModel(chat).result_images == "message"
    responses = langchain_openai.ChatOpenAI(
        model="gpt-4.1-mini", api_key="sk-test", use_responses_api=True
    )
    assert LangChainModel(responses).result_images == "tool"
    with pytest.raises(ConfigurationError, match="result_images is one of"):
        LangChainModel(fake, result_images="inline")  # type: ignore[arg-type]


async def test_an_mcp_picture_reaches_chat_openai_over_chat_completions_as_an_image(
    stdio_server: Any,
) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    from models.openai_server import OpenAIServer, Reply, completion, text_reply, usage

    call = {"id": "call_1", "type": "function", "function": {"name": "pictures", "arguments": "{}"}}
    ask = Reply(completion({"content": None, "tool_calls": [call]}, "tool_calls", usage(9, 3)), [])
    with OpenAIServer([ask, text_reply("A red dot.")]) as api:
        chat = langchain_openai.ChatOpenAI(
            model="gpt-4o-mini", base_url=api.url, api_key=api.api_key, max_retries=0
        )
        try:
            tools = await stdio_server.tools(include="pictures", approval={"pictures": False})
            result = await nd.generate_text(
                model=LangChainModel(chat), messages="Show me.", tools=tools
            )
        finally:
            await stdio_server.close()
    assert result.text == "A red dot."
    *_, tool, pictures = api.requests[1]["messages"]
    assert tool["role"] == "tool" and tool["content"].startswith("a red dot")
    assert pictures["role"] == "user"
    [image] = [p for p in pictures["content"] if p["type"] == "image_url"]
    assert image["image_url"]["url"].startswith("data:image/png;base64,")


async def test_an_mcp_picture_reaches_chat_openai_over_responses_as_an_input_image(
    stdio_server: Any,
) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    from models.openai_server import OpenAIServer, Reply
    from openai.types.responses import (
        Response,
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

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
        chat = langchain_openai.ChatOpenAI(
            model="gpt-4.1-mini",
            base_url=api.url,
            api_key=api.api_key,
            max_retries=0,
            use_responses_api=True,
        )
        try:
            tools = await stdio_server.tools(include="pictures", approval={"pictures": False})
            result = await nd.generate_text(
                model=LangChainModel(chat), messages="Show me.", tools=tools
            )
        finally:
            await stdio_server.close()
    assert result.text == "A red dot."
    [output] = [i for i in api.requests[1]["input"] if i.get("type") == "function_call_output"]
    assert output["call_id"] == "call_1"
    assert [part["type"] for part in output["output"]] == ["input_text", "input_image"]
    assert output["output"][1]["image_url"].startswith("data:image/png;base64,")
