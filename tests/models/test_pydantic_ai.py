"""PydanticAIModel on Pydantic AI's own test models (FunctionModel, TestModel) and on its
OpenAIChatModel against the loopback Chat Completions server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from pydantic import BaseModel

pytest.importorskip("pydantic_ai")

from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel as PaiOpenAI
from pydantic_ai.models.test import TestModel
from pydantic_ai.providers.openai import OpenAIProvider

import nbdurable as nd
from nbdurable.models import Price, PydanticAIModel, price_for
from nbdurable.models._base import (
    ModelRequest as NdRequest,
)
from nbdurable.models._base import (
    ResponseEvent,
    TextDeltaEvent,
    ToolCallDeltaEvent,
)

from .openai_server import (
    WEATHER,
    WEATHER_ANSWER,
    WEATHER_USAGE_0,
    WEATHER_USAGE_1,
    ErrorReply,
    OpenAIServer,
)
from .test_openai import PNG, WEATHER_TOOL, expected_cost, get_weather


class Forecast(BaseModel):
    city: str
    celsius: float


def ask(*messages: nd.Message, **kwargs: Any) -> NdRequest:
    return NdRequest(messages=messages, **kwargs)


class Recorder:
    """A FunctionModel function that records what Pydantic AI handed it and answers from a list."""

    def __init__(self, *answers: ModelResponse) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[ModelMessage], AgentInfo]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls.append((messages, info))
        return self.answers[min(len(self.calls), len(self.answers)) - 1]


# -- one call ---------------------------------------------------------------------------------


async def test_text_tool_calls_and_ids_come_back_as_ours() -> None:
    fn = Recorder(
        ModelResponse(
            parts=[
                TextPart("Checking."),
                ToolCallPart("get_weather", {"city": "Paris"}, "call_p"),
                ToolCallPart("get_weather", '{"city": "Tokyo"}', "call_t"),
            ]
        )
    )
    model = PydanticAIModel(FunctionModel(fn))
    response = await model.generate(ask(nd.user("Weather?"), tools=(WEATHER_TOOL,)))
    assert response.text == "Checking."
    assert [(c.tool_call_id, c.tool_name, c.args) for c in response.tool_calls] == [
        ("call_p", "get_weather", {"city": "Paris"}),
        ("call_t", "get_weather", {"city": "Tokyo"}),
    ]
    assert response.finish_reason == "tool_calls"
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    [(_, info)] = fn.calls
    [tool] = info.function_tools
    assert (tool.name, tool.description, tool.parameters_json_schema) == (
        "get_weather",
        "The weather in a city.",
        WEATHER_TOOL.parameters,
    )
    assert info.allow_text_output and info.output_tools == []


async def test_the_history_reaches_pydantic_ai_as_requests_and_responses() -> None:
    fn = Recorder(ModelResponse(parts=[TextPart("ok")]))
    model = PydanticAIModel(FunctionModel(fn))
    history = (
        nd.system("Be brief."),
        nd.user(["Look:", PNG, nd.ImagePart(url="https://example.org/a.jpg")]),
        nd.assistant(["On it.", nd.ToolCallPart(tool_call_id="c1", tool_name="t", args={"x": 1})]),
        nd.tool_message(
            [
                nd.ToolResultPart(tool_call_id="c1", tool_name="t", result={"rows": 3}),
                nd.ToolResultPart(tool_call_id="c2", tool_name="t", result="boom", is_error=True),
            ]
        ),
        nd.user("And now?"),
    )
    await model.generate(ask(*history, instructions="You are a data bot."))
    [(sent, info)] = fn.calls
    assert [type(m) for m in sent] == [ModelRequest, ModelResponse, ModelRequest]
    system, user = sent[0].parts
    assert isinstance(system, SystemPromptPart) and system.content == "Be brief."
    assert isinstance(user, UserPromptPart)
    text, image, url = user.content
    assert text == "Look:"
    assert isinstance(image, BinaryContent)
    assert (image.data, image.media_type) == (PNG, "image/png")  # sniffed from the bytes
    assert isinstance(url, ImageUrl) and url.url == "https://example.org/a.jpg"
    said, call = sent[1].parts
    assert isinstance(said, TextPart) and said.content == "On it."
    assert isinstance(call, ToolCallPart)
    assert (call.tool_call_id, call.tool_name, call.args) == ("c1", "t", {"x": 1})
    ok, failed, again = sent[2].parts
    assert isinstance(ok, ToolReturnPart) and isinstance(failed, ToolReturnPart)
    assert (ok.tool_call_id, ok.content, ok.outcome) == ("c1", {"rows": 3}, "success")
    assert (failed.tool_call_id, failed.content, failed.outcome) == ("c2", "boom", "failed")
    assert isinstance(again, UserPromptPart) and again.content == "And now?"
    assert info.instructions == "You are a data bot."


async def test_stream_yields_text_and_tool_argument_deltas_with_the_call_ids() -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        yield {0: DeltaToolCall(name="get_weather", json_args='{"ci', tool_call_id="call_p")}
        yield {0: DeltaToolCall(json_args='ty": "Paris"}')}
        yield {1: DeltaToolCall(name="get_weather", json_args='{"city": "Tokyo"}')}

    model = PydanticAIModel(FunctionModel(stream_function=stream))
    events = [e async for e in model.stream(ask(nd.user("Weather?"), tools=(WEATHER_TOOL,)))]
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert [(d.tool_call_id, d.args_delta) for d in deltas[:2]] == [
        ("call_p", '{"ci'),
        ("call_p", 'ty": "Paris"}'),
    ]
    assert isinstance(events[-1], ResponseEvent)
    calls = events[-1].response.tool_calls
    assert [(c.tool_call_id, c.args) for c in calls] == [
        ("call_p", {"city": "Paris"}),
        (deltas[2].tool_call_id, {"city": "Tokyo"}),  # Pydantic AI's id: deltas and call agree
    ]

    async def words(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for piece in ("It is ", "sunny ", "in Paris."):
            yield piece

    model = PydanticAIModel(FunctionModel(stream_function=words))
    events = [e async for e in model.stream(ask(nd.user("Weather?")))]
    assert [e.delta for e in events if isinstance(e, TextDeltaEvent)] == [
        "It is ",
        "sunny ",
        "in Paris.",
    ]
    assert isinstance(events[-1], ResponseEvent)
    assert events[-1].response.text == "It is sunny in Paris."
    assert events[-1].response.finish_reason == "stop"


@nd.tool
def forecast(city: str, days: int = 1) -> str:
    """The forecast for a city."""
    return f"sunny in {city} for {days} day(s)"


async def test_testmodel_drives_a_whole_run_with_our_tools() -> None:
    """Pydantic AI's TestModel calls every tool with arguments made from its schema."""
    result = await nd.generate_text(
        model=PydanticAIModel(TestModel()), messages="Weather?", tools=[forecast], max_steps=4
    )
    [call] = result.messages[1].tool_calls
    assert call.tool_name == "forecast" and isinstance(call.args["city"], str)
    [answer] = result.messages[2].tool_results
    assert answer.is_error is False and answer.result.startswith("sunny in")
    assert result.finish_reason == "stop" and result.text


def test_a_model_name_resolves_through_pydantic_ai(monkeypatch: pytest.MonkeyPatch) -> None:
    model = PydanticAIModel("test")
    assert (model.provider, model.model_name, model.model_id) == ("test", "test", "test")
    assert isinstance(model.model, TestModel)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(nd.ConfigurationError, match="OPENAI_API_KEY"):
        PydanticAIModel("openai:gpt-4o-mini")
    with pytest.raises(nd.ConfigurationError, match=r"pydantic_ai\.models\.Model"):
        PydanticAIModel(object())
    with pytest.raises(nd.ConfigurationError, match="structured_output"):
        PydanticAIModel("test", structured_output="json")  # type: ignore[arg-type]


# -- structured output ------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True], ids=["generate_text", "stream_chat"])
async def test_output_type_goes_through_an_output_tool(streaming: bool) -> None:
    fn = Recorder(
        ModelResponse(parts=[ToolCallPart("Forecast", {"city": "Paris", "celsius": 18.5}, "o1")])
    )

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        fn.calls.append((messages, info))
        yield {0: DeltaToolCall(name="Forecast", json_args='{"city": "Paris", ')}
        yield {0: DeltaToolCall(json_args='"celsius": 18.5}')}

    kwargs: dict[str, Any] = {
        "model": PydanticAIModel(FunctionModel(fn, stream_function=stream)),
        "messages": "Paris?",
        "output_type": Forecast,
    }
    if streaming:
        result = await nd.stream_chat(**kwargs).result()
    else:
        result = await nd.generate_text(**kwargs)
    assert result.output == Forecast(city="Paris", celsius=18.5)
    assert json.loads(result.text) == {"city": "Paris", "celsius": 18.5}
    [(_, info)] = fn.calls
    [output_tool] = info.output_tools
    assert output_tool.name == "Forecast" and output_tool.kind == "output"
    assert output_tool.parameters_json_schema == Forecast.model_json_schema()
    assert info.allow_text_output is False


async def test_testmodel_answers_structured_output_from_the_schema() -> None:
    result = await nd.generate_text(
        model=PydanticAIModel(TestModel()), messages="Paris?", output_type=Forecast
    )
    assert isinstance(result.output, Forecast)


async def test_native_structured_output_sends_the_schema_as_an_output_object() -> None:
    fn = Recorder(ModelResponse(parts=[TextPart('{"city": "Oslo", "celsius": -3}')]))
    model = PydanticAIModel(FunctionModel(fn), structured_output="native")
    result = await nd.generate_text(model=model, messages="Oslo?", output_type=Forecast)
    assert result.output == Forecast(city="Oslo", celsius=-3)
    [(_, info)] = fn.calls
    params = info.model_request_parameters
    assert params.output_mode == "native" and params.output_object is not None
    assert params.output_object.json_schema == Forecast.model_json_schema()
    assert info.output_tools == []


# -- usage, cost and settings -----------------------------------------------------------------


async def test_usage_is_pydantic_ais_and_the_cost_ours() -> None:
    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        from pydantic_ai.usage import RequestUsage

        used = RequestUsage(
            input_tokens=1000, output_tokens=200, cache_read_tokens=600, cache_write_tokens=100
        )
        return ModelResponse(parts=[TextPart("ok")], usage=used)

    price = Price(input=2.0, output=8.0, cached_input=0.5, cache_write=2.5)
    response = await PydanticAIModel(FunctionModel(fn), price=price).generate(ask(nd.user("x")))
    u = response.usage
    assert (u.input_tokens, u.output_tokens, u.total_tokens, u.cached_input_tokens) == (
        1000,
        200,
        1200,
        600,
    )
    assert u.cost == pytest.approx((300 * 2.0 + 600 * 0.5 + 100 * 2.5 + 200 * 8.0) / 1e6)
    unpriced = await PydanticAIModel(FunctionModel(fn)).generate(ask(nd.user("x")))
    assert unpriced.usage.cost is None  # "function:fn:" is in no price table


@pytest.fixture
def weather() -> Iterator[OpenAIServer]:
    with OpenAIServer(WEATHER) as server:
        yield server


def openai_via_pydantic_ai(server: OpenAIServer, **kwargs: Any) -> PydanticAIModel:
    provider = OpenAIProvider(base_url=server.url, api_key=server.api_key)
    return PydanticAIModel(PaiOpenAI("gpt-4o-mini", provider=provider), **kwargs)


@pytest.mark.parametrize("stream", [False, True], ids=["generate_text", "stream_chat"])
async def test_pydantic_ais_openai_model_runs_a_conversation_over_the_wire(
    weather: OpenAIServer, stream: bool
) -> None:
    model = openai_via_pydantic_ai(weather)
    assert (model.provider, model.model_name) == ("openai", "gpt-4o-mini")
    assert model.price == price_for("gpt-4o-mini")
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": [nd.user(["Weather in Paris and Tokyo?", PNG])],
        "tools": [get_weather],
        "instructions": "You are a weather bot.",
    }
    if stream:
        result = await nd.stream_chat(**kwargs).result()
    else:
        result = await nd.generate_text(**kwargs)
    assert result.text == WEATHER_ANSWER
    calls = result.messages[1].tool_calls
    assert [c.tool_call_id for c in calls] == ["call_Pq7aW3paris", "call_Zt9kD1tokyo"]
    assert result.usage.input_tokens == 152 + 231 and result.usage.cached_input_tokens == 128
    assert result.usage.cost == pytest.approx(
        expected_cost(WEATHER_USAGE_0) + expected_cost(WEATHER_USAGE_1)  # type: ignore[operator]
    )
    first = weather.requests[0]
    assert first["messages"][0] == {"role": "system", "content": "You are a weather bot."}
    image = first["messages"][1]["content"][1]
    assert image["type"] == "image_url" and image["image_url"]["url"].startswith(
        "data:image/png;base64,"
    )
    answered = weather.requests[1]["messages"]
    assert [m["role"] for m in answered][-2:] == ["tool", "tool"]
    assert answered[-2]["tool_call_id"] == "call_Pq7aW3paris"


async def test_the_sdks_own_retries_are_off() -> None:
    with OpenAIServer([ErrorReply(503, "busy", type="server_error")] * 3) as server:
        model = openai_via_pydantic_ai(server)
        assert model.settings == {"max_retries": 0}
        with pytest.raises(nd.ProviderUnavailableError):
            await model.generate(ask(nd.user("hi")))
        assert len(server.requests) == 1  # one attempt: retrying is the runtime's job
        with pytest.raises(nd.ProviderUnavailableError):
            await openai_via_pydantic_ai(server, settings={"max_retries": 1}).generate(
                ask(nd.user("hi"))
            )
        assert len(server.requests) == 3  # asked for: one SDK retry


async def test_settings_reach_the_provider() -> None:
    with OpenAIServer(WEATHER) as server:
        model = openai_via_pydantic_ai(server, settings={"temperature": 0.25, "max_tokens": 77})
        await model.generate(ask(nd.user("Weather?"), tools=(WEATHER_TOOL,)))
    sent = server.requests[0]
    assert sent["temperature"] == 0.25
    assert 77 in (sent.get("max_tokens"), sent.get("max_completion_tokens"))


async def test_pydantic_ais_openai_stream_carries_argument_fragments_with_their_ids(
    weather: OpenAIServer,
) -> None:
    model = openai_via_pydantic_ai(weather)
    request = ask(nd.user("Weather in Paris and Tokyo?"), tools=(WEATHER_TOOL,))
    events = [e async for e in model.stream(request)]
    assert "".join(e.delta for e in events if isinstance(e, TextDeltaEvent)) == (
        "Let me check both cities."
    )
    fragments: dict[str, str] = {}
    for e in events:
        if isinstance(e, ToolCallDeltaEvent):
            assert e.tool_name == "get_weather"
            fragments[e.tool_call_id] = fragments.get(e.tool_call_id, "") + e.args_delta
    assert {k: json.loads(v) for k, v in fragments.items()} == {
        "call_Pq7aW3paris": {"city": "Paris"},
        "call_Zt9kD1tokyo": {"city": "Tokyo", "unit": "celsius"},
    }
    assert isinstance(events[-1], ResponseEvent)
    assert events[-1].response == await model.generate(request)  # streamed or not, one turn
