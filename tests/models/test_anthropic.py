"""AnthropicModel over a loopback Messages API server: requests sent, responses read."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.tiers import skip_without

import nbdurable as nd
from nbdurable.models import ModelRequest, ResponseEvent, TextDeltaEvent, ToolCallDeltaEvent
from nbdurable.models import ToolSpec as Spec
from nbdurable.models._anthropic import AnthropicModel

from .anthropic_server import AnthropicServer, message, text, tool_use

skip_without("anthropic", reason="the anthropic extra is not installed")

MODEL = "claude-haiku-4-5"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
WEATHER = Spec(
    name="get_weather",
    description="Current weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture
async def served() -> AsyncIterator[tuple[AnthropicServer, AnthropicModel]]:
    server = AnthropicServer().start()
    model = AnthropicModel(MODEL, api_key="sk-ant-test", base_url=server.url)
    yield server, model
    await model.aclose()
    server.stop()


def two_calls() -> dict[str, Any]:
    return message(
        text("I'll check both cities."),
        tool_use("toolu_01A09q90qw90lq917835lq9", "get_weather", city="Paris"),
        tool_use("toolu_01B7hdq2Fv8rVx2b1yQ9kKxF", "get_weather", city="London"),
        stop_reason="tool_use",
        input_tokens=400,
        output_tokens=90,
        cache_read=1000,
        cache_write=200,
    )


async def collect(model: AnthropicModel, request: ModelRequest) -> list[Any]:
    return [event async for event in model.stream(request)]


async def test_generate_reads_text_tool_calls_usage_and_cost(served: Any) -> None:
    server, model = served
    server.add(two_calls())
    response = await model.generate(ModelRequest(messages=(nd.user("Weather?"),), tools=(WEATHER,)))
    assert response.text == "I'll check both cities."
    assert [(c.tool_call_id, c.args) for c in response.tool_calls] == [
        ("toolu_01A09q90qw90lq917835lq9", {"city": "Paris"}),
        ("toolu_01B7hdq2Fv8rVx2b1yQ9kKxF", {"city": "London"}),
    ]
    assert response.finish_reason == "tool_calls"
    assert response.model_id == "claude-sonnet-4-5-20250929"
    usage = response.usage
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (1600, 1000, 90)
    assert usage.total_tokens == 1690
    # claude-haiku-4-5: $1 in, $5 out, $0.10 cache reads, $1.25 cache writes per million
    assert usage.cost == pytest.approx((400 * 1.0 + 200 * 1.25 + 1000 * 0.10 + 90 * 5.0) / 1e6)
    [body] = server.requests
    assert body["model"] == MODEL and body["max_tokens"] == 4096 and "stream" not in body
    assert body["tools"] == [
        {"name": "get_weather", "description": "Current weather in a city.",
         "input_schema": WEATHER.parameters}
    ]  # fmt: skip
    sent = server.headers[0]
    assert "sk-ant-test" in (sent.get("x-api-key", ""), sent.get("authorization", "")[7:])
    assert "anthropic-version" in server.headers[0]


async def test_stream_yields_deltas_then_one_response(served: Any) -> None:
    server, model = served
    server.add(two_calls())
    events = await collect(model, ModelRequest(messages=(nd.user("Weather?"),), tools=(WEATHER,)))
    assert server.requests[0]["stream"] is True
    assert isinstance(events[-1], ResponseEvent)
    assert sum(isinstance(e, ResponseEvent) for e in events) == 1
    texts = [e.delta for e in events if isinstance(e, TextDeltaEvent)]
    assert len(texts) > 1 and "".join(texts) == "I'll check both cities."
    fragments: dict[str, str] = {}
    for e in events:
        if isinstance(e, ToolCallDeltaEvent):
            fragments[e.tool_call_id] = fragments.get(e.tool_call_id, "") + e.args_delta
    assert {k: json.loads(v) for k, v in fragments.items()} == {
        "toolu_01A09q90qw90lq917835lq9": {"city": "Paris"},
        "toolu_01B7hdq2Fv8rVx2b1yQ9kKxF": {"city": "London"},
    }
    response = events[-1].response
    assert [c.args for c in response.tool_calls] == [{"city": "Paris"}, {"city": "London"}]
    assert response.finish_reason == "tool_calls"
    # usage from message_start (input, cache) and message_delta (output)
    assert (response.usage.input_tokens, response.usage.output_tokens) == (1600, 90)
    assert response.usage.cached_input_tokens == 1000 and response.usage.cost is not None


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "other"),
    ],
)
async def test_stop_reasons_are_mapped(served: Any, stop_reason: str, finish: str) -> None:
    server, model = served
    server.add(message(text("ok"), stop_reason=stop_reason))
    server.add(message(text("ok"), stop_reason=stop_reason))
    request = ModelRequest(messages=(nd.user("hi"),))
    assert (await model.generate(request)).finish_reason == finish
    assert (await collect(model, request))[-1].response.finish_reason == finish


async def test_history_system_tool_results_and_images_in_the_request(served: Any) -> None:
    server, model = served
    server.add(message(text("Done.")))
    call_a = nd.ToolCallPart(
        tool_call_id="toolu_01A", tool_name="get_weather", args={"city": "Paris"}
    )
    call_b = nd.ToolCallPart(
        tool_call_id="toolu_01B", tool_name="get_weather", args={"city": "Oslo"}
    )
    history = (
        nd.system("Answer briefly."),
        nd.user(["What is in this picture, and the weather?", PNG,
                 nd.ImagePart(url="https://example.com/cat.jpg")]),
        nd.assistant(["Checking.", call_a, call_b]),
        nd.tool_message([
            nd.ToolResultPart(tool_call_id="toolu_01A", tool_name="get_weather",
                              result={"temp_c": 18}),
            nd.ToolResultPart(tool_call_id="toolu_01B", tool_name="get_weather",
                              result="no station", is_error=True),
        ]),
        nd.user("And tomorrow?"),
    )  # fmt: skip
    request = ModelRequest(messages=history, tools=(WEATHER,), instructions="You are a forecaster.")
    await model.generate(request)
    body = server.requests[0]
    assert body["system"] == "You are a forecaster.\n\nAnswer briefly."
    assert body["messages"] == [
        {"role": "user", "content": [
            {"type": "text", "text": "What is in this picture, and the weather?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(PNG).decode()}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        ]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {"city": "Oslo"}},
        ]},
        # tool results and the next user text: one user turn, results first
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": '{"temp_c": 18}'},
            {"type": "tool_result", "tool_use_id": "toolu_01B", "content": "no station",
             "is_error": True},
            {"type": "text", "text": "And tomorrow?"},
        ]},
    ]  # fmt: skip


async def test_image_media_type_is_kept_when_given(served: Any) -> None:
    server, model = served
    server.add(message(text("A cat.")))
    image = nd.ImagePart(data=b"\xff\xd8\xff\xe0jpeg", media_type="image/jpeg")
    await model.generate(ModelRequest(messages=(nd.user(["What is it?", image]),)))
    source = server.requests[0]["messages"][0]["content"][1]["source"]
    assert source["media_type"] == "image/jpeg" and source["type"] == "base64"


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp_c": {"type": "integer"}},
    "required": ["city", "temp_c"],
}


def answer(**values: Any) -> dict[str, Any]:
    return message(tool_use("toolu_01Ans", "Forecast", **values), stop_reason="tool_use")


async def test_structured_output_uses_a_forced_tool_and_returns_json_text(served: Any) -> None:
    server, model = served
    server.add(answer(city="Paris", temp_c=18), answer(city="Paris", temp_c=18))
    request = ModelRequest(
        messages=(nd.user("Paris?"),), output_schema=SCHEMA, output_name="Forecast"
    )
    response = await model.generate(request)
    assert json.loads(response.text) == {"city": "Paris", "temp_c": 18}
    assert response.tool_calls == () and response.finish_reason == "stop"
    body = server.requests[0]
    assert body["tools"][-1]["name"] == "Forecast"
    assert body["tools"][-1]["input_schema"] == SCHEMA
    assert body["tool_choice"] == {"type": "tool", "name": "Forecast"}
    events = await collect(model, request)
    assert not any(isinstance(e, ToolCallDeltaEvent) for e in events)
    streamed = "".join(e.delta for e in events if isinstance(e, TextDeltaEvent))
    assert streamed == events[-1].response.text
    assert json.loads(events[-1].response.text) == {"city": "Paris", "temp_c": 18}


async def test_structured_output_with_tools_lets_the_model_call_them(served: Any) -> None:
    server, model = served
    server.add(message(tool_use("toolu_01W", "get_weather", city="Paris"), stop_reason="tool_use"))
    request = ModelRequest(
        messages=(nd.user("Paris?"),), tools=(WEATHER,), output_schema=SCHEMA,
        output_name="Forecast",
    )  # fmt: skip
    response = await model.generate(request)
    assert [c.tool_name for c in response.tool_calls] == ["get_weather"]
    body = server.requests[0]
    assert [t["name"] for t in body["tools"]] == ["get_weather", "Forecast"]
    assert body["tool_choice"] == {"type": "any"}


async def test_structured_output_native_mode_sends_output_config(served: Any) -> None:
    server, _ = served
    native = AnthropicModel(MODEL, api_key="k", base_url=server.url, structured_output="native")
    server.add(message(text('{"city": "Paris", "temp_c": 18}')))
    request = ModelRequest(messages=(nd.user("Paris?"),), output_schema=SCHEMA)
    response = await native.generate(request)
    await native.aclose()
    assert json.loads(response.text) == {"city": "Paris", "temp_c": 18}
    body = server.requests[0]
    assert "tools" not in body and "tool_choice" not in body
    fmt = body["output_config"]["format"]
    assert fmt["type"] == "json_schema" and fmt["schema"]["additionalProperties"] is False


async def test_price_can_be_given_or_missing(served: Any) -> None:
    server, _ = served
    priced = AnthropicModel("my-claude", api_key="k", base_url=server.url,
                            price=nd.models.Price(2.0, 10.0))  # fmt: skip
    unpriced = AnthropicModel("my-claude", api_key="k", base_url=server.url)
    server.add(message(text("a"), input_tokens=1000, output_tokens=100))
    server.add(message(text("a"), input_tokens=1000, output_tokens=100))
    request = ModelRequest(messages=(nd.user("hi"),))
    assert (await priced.generate(request)).usage.cost == pytest.approx(0.003)
    assert (await unpriced.generate(request)).usage.cost is None
    await priced.aclose()
    await unpriced.aclose()


def test_cost_of_bills_cache_writes_at_their_own_rate() -> None:
    price = nd.models.Price(2.0, 10.0, cached_input=0.2, cache_write=2.5)
    usage = nd.Usage(input_tokens=1_000, output_tokens=100, cached_input_tokens=300)
    written = nd.models.cost_of(usage, price, cache_write_tokens=200)
    assert written == pytest.approx((500 * 2.0 + 300 * 0.2 + 200 * 2.5 + 100 * 10.0) / 1e6)
    # a price without a write rate bills writes as input; writes never exceed fresh input
    plain = nd.models.Price(2.0, 10.0, cached_input=0.2)
    assert nd.models.cost_of(usage, plain, cache_write_tokens=200) == nd.models.cost_of(
        usage, plain
    )
    capped = nd.models.cost_of(usage, price, cache_write_tokens=5_000)
    assert capped == pytest.approx((700 * 2.5 + 300 * 0.2 + 100 * 10.0) / 1e6)
    set_one = nd.models.set_price("claude-test-cache", input=1.0, output=2.0, cache_write=1.25)
    assert nd.models.price_for("claude-test-cache-20990101") == set_one
    del nd.models.PRICES["claude-test-cache"]
