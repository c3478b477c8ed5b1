"""OpenAIChatModel against a loopback Chat Completions server, through the official SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.models import OpenAIChatModel, price_for
from nbdurable.models._base import (
    ModelRequest,
    ResponseEvent,
    TextDeltaEvent,
    ToolCallDeltaEvent,
    ToolSpec,
)

from .openai_server import (
    EMAIL,
    EMAIL_CALL_ID,
    WEATHER,
    WEATHER_ANSWER,
    WEATHER_USAGE_0,
    WEATHER_USAGE_1,
    OpenAIServer,
)

pytest.importorskip("openai")

MODEL = "gpt-4o-mini"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
WEATHER_TOOL = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
        "required": ["city"],
    },
)


@nd.tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """The current weather in a city."""
    return {"Paris": "18 °C, cloudy", "Tokyo": "24 °C, sunny"}[city] + f" ({unit})"


@nd.tool(needs_approval=True)
def send_email(to: str, subject: str) -> str:
    """Email a report."""
    return f"sent {subject!r} to {to}"


@pytest.fixture
def weather() -> Iterator[OpenAIServer]:
    with OpenAIServer(WEATHER) as server:
        yield server


def model_for(server: OpenAIServer, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel(MODEL, base_url=server.url, api_key=server.api_key, **kwargs)


def ask_weather() -> ModelRequest:
    return ModelRequest(
        messages=(nd.user("Weather in Paris and Tokyo?"),),
        tools=(WEATHER_TOOL,),
        instructions="You are a weather bot.",
    )


def expected_cost(used: dict[str, Any]) -> float | None:
    return nd.models.cost_of(
        nd.Usage(
            input_tokens=used["prompt_tokens"],
            output_tokens=used["completion_tokens"],
            cached_input_tokens=used["prompt_tokens_details"]["cached_tokens"],
        ),
        price_for(MODEL),
    )


# -- one call ---------------------------------------------------------------------------------


async def test_generate_maps_text_parallel_calls_usage_and_cost(weather: OpenAIServer) -> None:
    model = model_for(weather)
    response = await model.generate(ask_weather())
    assert response.text == "Let me check both cities."
    assert [(c.tool_call_id, c.tool_name, c.args) for c in response.tool_calls] == [
        ("call_Pq7aW3paris", "get_weather", {"city": "Paris"}),
        ("call_Zt9kD1tokyo", "get_weather", {"city": "Tokyo", "unit": "celsius"}),
    ]
    assert response.finish_reason == "tool_calls"
    assert response.model_id == "gpt-4o-mini-2024-07-18"
    u = response.usage
    assert (u.input_tokens, u.output_tokens, u.total_tokens, u.cached_input_tokens) == (
        152,
        48,
        200,
        128,
    )
    # 24 fresh + 128 cached input tokens, 48 output tokens at gpt-4o-mini's price
    assert u.cost == pytest.approx((24 * 0.15 + 128 * 0.075 + 48 * 0.60) / 1e6)
    assert u.cost == pytest.approx(expected_cost(WEATHER_USAGE_0))

    [sent] = weather.requests
    assert sent["model"] == MODEL and not sent.get("stream") and "stream_options" not in sent
    assert sent["messages"] == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
    ]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER_TOOL.parameters,
            },
        }
    ]
    assert "response_format" not in sent
    assert weather.headers[0]["authorization"] == "Bearer sk-loopback"


async def test_stream_yields_deltas_then_one_complete_response(weather: OpenAIServer) -> None:
    model = model_for(weather)
    events = [event async for event in model.stream(ask_weather())]
    texts = [e.delta for e in events if isinstance(e, TextDeltaEvent)]
    assert texts == ["Let me", " check both cities."]
    fragments = [
        (e.tool_call_id, e.tool_name, e.args_delta)
        for e in events
        if isinstance(e, ToolCallDeltaEvent)
    ]
    assert fragments == [
        ("call_Pq7aW3paris", "get_weather", '{"ci'),
        ("call_Pq7aW3paris", "get_weather", 'ty": "Pa'),
        ("call_Pq7aW3paris", "get_weather", 'ris"}'),
        ("call_Zt9kD1tokyo", "get_weather", '{"city": '),
        ("call_Zt9kD1tokyo", "get_weather", '"Tokyo", "un'),
        ("call_Zt9kD1tokyo", "get_weather", 'it": "celsius"}'),
    ]
    assert sum(isinstance(e, ResponseEvent) for e in events) == 1
    assert isinstance(events[-1], ResponseEvent)
    streamed = events[-1].response
    generated = await model.generate(ask_weather())
    assert streamed == generated  # the same turn, streamed or not

    sent = weather.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


async def test_stream_usage_can_be_turned_off(weather: OpenAIServer) -> None:
    model = model_for(weather, stream_usage=False)
    [e async for e in model.stream(ask_weather())]
    assert "stream_options" not in weather.requests[0]


async def test_options_and_extra_body_reach_the_server(weather: OpenAIServer) -> None:
    model = model_for(
        weather, options={"temperature": 0.2, "max_completion_tokens": 64}, extra_body={"top_k": 5}
    )
    await model.generate(ask_weather())
    sent = weather.requests[0]
    assert (sent["temperature"], sent["max_completion_tokens"], sent["top_k"]) == (0.2, 64, 5)


# -- the loop over the wire -------------------------------------------------------------------


async def test_generate_text_runs_the_conversation_with_tools(weather: OpenAIServer) -> None:
    result = await nd.generate_text(
        model=model_for(weather),
        messages="Weather in Paris and Tokyo?",
        tools=[get_weather],
        instructions="You are a weather bot.",
    )
    assert result.text == WEATHER_ANSWER and len(result.steps) == 2
    assert result.usage.input_tokens == 152 + 231
    assert result.usage.cost == pytest.approx(
        expected_cost(WEATHER_USAGE_0) + expected_cost(WEATHER_USAGE_1)  # type: ignore[operator]
    )
    assert len(weather.requests) == 2
    assert weather.requests[1]["messages"] == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather in Paris and Tokyo?"},
        {
            "role": "assistant",
            "content": "Let me check both cities.",
            "tool_calls": [
                {
                    "id": "call_Pq7aW3paris",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_Zt9kD1tokyo",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city": "Tokyo", "unit": "celsius"}',
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_Pq7aW3paris", "content": "18 °C, cloudy (celsius)"},
        {"role": "tool", "tool_call_id": "call_Zt9kD1tokyo", "content": "24 °C, sunny (celsius)"},
    ]


async def test_stream_chat_streams_the_conversation(weather: OpenAIServer) -> None:
    stream = nd.stream_chat(
        model=model_for(weather), messages="Weather in Paris and Tokyo?", tools=[get_weather]
    )
    parts = [part async for part in stream.full_stream]
    kinds = [p.type for p in parts]
    assert kinds.count("tool-call") == 2 and kinds.count("tool-result") == 2
    assert kinds[0] == "step-start" and kinds[-1] == "finish"
    assert await stream.text == WEATHER_ANSWER
    assert (await stream.usage).output_tokens == 48 + 17
    assert all(r["stream"] is True for r in weather.requests) and len(weather.requests) == 2
    tool_messages = [m for m in weather.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_Pq7aW3paris", "call_Zt9kD1tokyo"]


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
async def test_suspend_and_resume_keep_provider_call_ids(tmp_path: Path, streaming: bool) -> None:
    signer = nd.ApprovalSigner(secret="loopback secret")
    with OpenAIServer(EMAIL) as server:
        store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
        try:
            run = nd.stream_chat if streaming else None
            kwargs: dict[str, Any] = {
                "model": model_for(server),
                "messages": "Email the weekly report to ops.",
                "tools": [send_email],
                "session": nd.DurableSession(store, run_id="email-1"),
                "approval_signer": signer,
            }
            first = await (run(**kwargs).result() if run else nd.generate_text(**kwargs))
            assert first.status == "suspended"
            [request] = first.pending_approvals
            assert request.tool_call_id == EMAIL_CALL_ID
            assert json.loads(json.dumps(request.input)) == {
                "to": "ops@example.com",
                "subject": "Weekly report",
            }
        finally:
            store.close()

        # "hours later, in another process": a new store handle and a new model
        store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
        try:
            saved = store.load("email-1")
            assert saved.messages[-1].tool_calls[0].tool_call_id == EMAIL_CALL_ID
            done = await nd.resume_from_checkpoint(
                store,
                "email-1",
                model=model_for(server),
                tools=[send_email],
                approval_signer=signer,
                approval_responses=[
                    nd.ToolApprovalResponse(
                        approval_id=request.approval_id, approved=True, token=request.token
                    )
                ],
            )
        finally:
            store.close()
    assert done.status == "completed"
    assert done.text == "The weekly report is on its way to ops@example.com."
    assert len(server.requests) == 2
    history = server.requests[1]["messages"]
    assert history[1]["tool_calls"][0]["id"] == EMAIL_CALL_ID
    assert history[1]["content"] is None
    assert history[2] == {
        "role": "tool",
        "tool_call_id": EMAIL_CALL_ID,
        "content": "sent 'Weekly report' to ops@example.com",
    }
