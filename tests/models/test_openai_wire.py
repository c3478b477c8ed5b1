"""OpenAIChatModel's wire details: request shapes, compatible servers' variations, construction."""

from __future__ import annotations

import base64

import pytest

import nbdurable as nd
from nbdurable.models import OpenAIChatModel, price_for
from nbdurable.models._base import ModelRequest, ResponseEvent

from .openai_server import OpenAIServer, Reply, chunk, completion, text_reply, usage
from .test_openai import PNG, ask_weather, get_weather, model_for

pytest.importorskip("openai")


# -- request shapes ---------------------------------------------------------------------------


async def test_images_go_as_data_urls_and_urls() -> None:
    with OpenAIServer([text_reply("A tiny picture.")]) as server:
        message = nd.user(
            [
                "What is in these?",
                nd.ImagePart(data=PNG),
                nd.ImagePart(data=b"\xff\xd8\xff\xe0jpeg", media_type="image/jpeg"),
                nd.ImagePart(url="https://example.com/cat.webp"),
            ]
        )
        response = await model_for(server).generate(ModelRequest(messages=(message,)))
    assert response.text == "A tiny picture."
    [sent] = server.requests
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
                },
                {
                    "type": "image_url",
                    "image_url": {
                        "url": "data:image/jpeg;base64,"
                        + base64.b64encode(b"\xff\xd8\xff\xe0jpeg").decode()
                    },
                },
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.webp"}},
            ],
        }
    ]


async def test_structured_output_asks_for_a_json_schema_and_returns_the_json_text() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
        "required": ["city", "celsius"],
        "additionalProperties": False,
    }
    answer = '{"city": "Paris", "celsius": 18}'
    with OpenAIServer([text_reply(answer), text_reply(answer)]) as server:
        model = model_for(server)
        request = ModelRequest(
            messages=(nd.user("Paris weather as JSON"),),
            output_schema=schema,
            output_name="Weather",
        )
        assert (await model.generate(request)).text == answer
        events = [e async for e in model.stream(request)]
    assert isinstance(events[-1], ResponseEvent) and events[-1].response.text == answer
    for sent in server.requests:
        assert sent["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "Weather", "schema": schema, "strict": True},
        }


async def test_history_roles_and_error_results_on_the_wire() -> None:
    history = (
        nd.system("Be brief."),
        nd.user("Drop it."),
        nd.assistant(nd.ToolCallPart(tool_call_id="call_1", tool_name="drop", args={})),
        nd.tool_message(
            [
                nd.ToolResultPart(
                    tool_call_id="call_1", tool_name="drop", result={"ok": False}, is_error=True
                )
            ]
        ),
        nd.assistant("It failed."),
        nd.user("Why?"),
    )
    with OpenAIServer([text_reply("Permissions.")]) as server:
        await model_for(server).generate(ModelRequest(messages=history))
    assert server.requests[0]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Drop it."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "drop", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": 'Error: {"ok": false}'},
        {"role": "assistant", "content": "It failed."},
        {"role": "user", "content": "Why?"},
    ]


# -- compatible servers' variations -----------------------------------------------------------


async def test_a_compatible_server_without_ids_usage_or_tool_calls_finish() -> None:
    """Ollama/llama.cpp-style: a whole call in one chunk, no call id, finish "stop", no usage."""
    chunks = [
        chunk({"role": "assistant", "content": ""}, model="llama3.1"),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ]
            },
            model="llama3.1",
        ),
        chunk({}, "stop", model="llama3.1"),
    ]
    message = {
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        ],
    }
    reply = Reply(completion(message, "stop", None, model="llama3.1"), chunks)
    with OpenAIServer([reply, reply], api_key="ignored") as server:
        model = OpenAIChatModel("llama3.1", base_url=server.url, api_key="ignored")
        assert model.price is None
        streamed = [e async for e in model.stream(ask_weather())][-1]
        generated = await model.generate(ask_weather())
    assert isinstance(streamed, ResponseEvent)
    for response in (streamed.response, generated):
        [call] = response.tool_calls
        assert call.tool_name == "get_weather" and call.tool_call_id.startswith("call_")
        assert response.finish_reason == "tool_calls"
        assert response.usage == nd.Usage() and response.usage.cost is None
        assert response.model_id == "llama3.1"


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("function_call", "other"),
        ("eos", "other"),
    ],
)
async def test_finish_reasons_are_mapped(reason: str, expected: str) -> None:
    reply = Reply(completion({"content": "Hi"}, reason, usage(3, 1)), [])
    with OpenAIServer([reply]) as server:
        assert (await model_for(server).generate(ask_weather())).finish_reason == expected


async def test_a_refusal_is_text_with_content_filter() -> None:
    message = {"content": None, "refusal": "I can't help with that."}
    reply = Reply(completion(message, "stop", usage(3, 5)), [])
    with OpenAIServer([reply]) as server:
        response = await model_for(server).generate(ask_weather())
    assert response.text == "I can't help with that."
    assert response.finish_reason == "content_filter"


async def test_arguments_that_are_not_json_reach_the_tool_as_an_error() -> None:
    message = {
        "content": None,
        "tool_calls": [
            {
                "id": "call_bad",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": Par'},
            }
        ],
    }
    script = [Reply(completion(message, "tool_calls", usage(3, 5)), []), text_reply("Sorry.")]
    with OpenAIServer(script) as server:
        result = await nd.generate_text(
            model=model_for(server), messages="Weather?", tools=[get_weather]
        )
    assert result.text == "Sorry."
    [result_message] = [m for m in result.messages if m.role == "tool"]
    assert result_message.tool_results[0].is_error
    sent_call = server.requests[1]["messages"][1]["tool_calls"][0]
    assert sent_call["function"]["arguments"] == '{"city": Par'  # echoed as the model wrote it


# -- construction -----------------------------------------------------------------------------


def test_construction_offline_defaults_and_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-openai-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    local = OpenAIChatModel("qwen2.5", base_url="http://127.0.0.1:9/v1")
    # the OpenAI key is not sent to another server
    assert local.client.api_key == "not-needed" and local.client.max_retries == 0
    assert OpenAIChatModel("gpt-4o").client.api_key == "sk-real-openai-key"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert local.price is None and local.model_id == "qwen2.5"
    assert "not-needed" not in repr(local)
    assert OpenAIChatModel("gpt-4o-2024-08-06", api_key="k").price == price_for("gpt-4o")
    custom = nd.models.Price(1.0, 2.0)
    assert OpenAIChatModel("gpt-4o", api_key="k", price=custom).price is custom
    with pytest.raises(nd.ConfigurationError, match="api_key"):
        OpenAIChatModel("gpt-4o")
    with pytest.raises(nd.ConfigurationError, match="messages"):
        OpenAIChatModel("gpt-4o", api_key="k", options={"messages": []})
    with pytest.raises(nd.ConfigurationError):
        OpenAIChatModel("")
    assert isinstance(local, nd.StreamingModel)


def test_a_passed_client_gets_retries_turned_off() -> None:
    import openai

    client = openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=5)
    model = OpenAIChatModel("gpt-4o", client=client, timeout=3.0)
    assert model.client.max_retries == 0 and model.client.timeout == 3.0
    assert client.max_retries == 5  # the caller's client is left as it was
    with pytest.raises(nd.ConfigurationError, match="not both"):
        OpenAIChatModel("gpt-4o", client=client, base_url="http://x")
    with pytest.raises(nd.ConfigurationError, match="AsyncOpenAI"):
        OpenAIChatModel("gpt-4o", client=object())  # type: ignore[arg-type]


def test_missing_extra_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "openai", None)  # the extra is not installed
    with pytest.raises(nd.ConfigurationError, match=r"nbdurable\[openai\]"):
        OpenAIChatModel("gpt-4o", api_key="k")
