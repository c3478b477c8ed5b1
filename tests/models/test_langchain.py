"""LangChainModel on LangChain's own fake chat models, and on ChatOpenAI (langchain-openai)
against the loopback Chat Completions server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from pydantic import BaseModel

pytest.importorskip("langchain_core")

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

import nbdurable as nd
from nbdurable.models import LangChainModel, Price, price_for
from nbdurable.models._base import (
    ModelRequest,
    ResponseEvent,
    TextDeltaEvent,
    ToolCallDeltaEvent,
)

from .interop_agents import ToolCallingFake
from .openai_server import (
    WEATHER,
    WEATHER_ANSWER,
    WEATHER_USAGE_0,
    WEATHER_USAGE_1,
    OpenAIServer,
)
from .test_openai import PNG, WEATHER_TOOL, expected_cost, get_weather


class Forecast(BaseModel):
    city: str
    celsius: float


def ask(*messages: nd.Message, **kwargs: Any) -> ModelRequest:
    return ModelRequest(messages=messages, **kwargs)


def fake(*responses: AIMessage) -> ToolCallingFake:
    return ToolCallingFake(responses=list(responses))


def weather_call(text: str = "Checking.") -> AIMessage:
    return AIMessage(
        content=text,
        tool_calls=[
            {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_p"},
            {"name": "get_weather", "args": {"city": "Tokyo"}, "id": "call_t"},
        ],
        usage_metadata={
            "input_tokens": 100,
            "output_tokens": 20,
            "total_tokens": 120,
            "input_token_details": {"cache_read": 60, "cache_creation": 10},
        },
        response_metadata={"finish_reason": "tool_calls", "model_name": "fake-4o-2025"},
    )


# -- one call ---------------------------------------------------------------------------------


async def test_text_tool_calls_usage_and_cost_come_back_as_ours() -> None:
    price = Price(input=2.0, output=8.0, cached_input=0.5, cache_write=2.5)
    model = LangChainModel(fake(weather_call()), price=price)
    response = await model.generate(ask(nd.user("Weather?"), tools=(WEATHER_TOOL,)))
    assert response.text == "Checking."
    assert [(c.tool_call_id, c.tool_name, c.args) for c in response.tool_calls] == [
        ("call_p", "get_weather", {"city": "Paris"}),
        ("call_t", "get_weather", {"city": "Tokyo"}),
    ]
    assert (response.finish_reason, response.model_id) == ("tool_calls", "fake-4o-2025")
    u = response.usage
    assert (u.input_tokens, u.output_tokens, u.total_tokens, u.cached_input_tokens) == (
        100,
        20,
        120,
        60,
    )
    assert u.cost == pytest.approx((30 * 2.0 + 60 * 0.5 + 10 * 2.5 + 20 * 8.0) / 1e6)


async def test_the_history_reaches_langchain_as_its_messages_and_tools() -> None:
    chat = fake(AIMessage(content="ok"))
    model = LangChainModel(chat)
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
    )
    await model.generate(ask(*history, tools=(WEATHER_TOOL,), instructions="You are a bot."))
    [sent] = chat.seen
    assert [type(m) for m in sent] == [
        SystemMessage,
        SystemMessage,
        HumanMessage,
        AIMessage,
        ToolMessage,
        ToolMessage,
    ]
    assert [sent[0].content, sent[1].content] == ["You are a bot.", "Be brief."]
    assert sent[2].content == [
        {"type": "text", "text": "Look:"},
        {"type": "image", "base64": "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAAA", "mime_type": "image/png"},
        {"type": "image", "url": "https://example.org/a.jpg"},
    ]
    assert sent[3].content == "On it."
    assert sent[3].tool_calls == [{"name": "t", "args": {"x": 1}, "id": "c1", "type": "tool_call"}]
    ok, failed = sent[4], sent[5]
    assert isinstance(ok, ToolMessage) and isinstance(failed, ToolMessage)
    assert (ok.tool_call_id, ok.content, ok.status) == ("c1", '{"rows": 3}', "success")
    assert (failed.tool_call_id, failed.content, failed.status) == ("c2", "Error: boom", "error")
    [bound] = chat.bound
    assert bound["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather in a city.",
                "parameters": WEATHER_TOOL.parameters,
            },
        }
    ]
    assert bound["tool_choice"] is None


async def test_a_run_with_tools_goes_through_bind_tools_and_keeps_the_ids() -> None:
    chat = fake(weather_call(), AIMessage(content=WEATHER_ANSWER))
    result = await nd.generate_text(
        model=LangChainModel(chat), messages="Weather?", tools=[get_weather]
    )
    assert result.text == WEATHER_ANSWER
    answered = [m for m in chat.seen[1] if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.name, m.content) for m in answered] == [
        ("call_p", "get_weather", "18 °C, cloudy (celsius)"),
        ("call_t", "get_weather", "24 °C, sunny (celsius)"),
    ]


async def test_a_model_without_streaming_answers_in_one_piece_when_streamed() -> None:
    events = [e async for e in LangChainModel(fake(weather_call())).stream(ask(nd.user("?")))]
    assert [type(e) for e in events] == [
        TextDeltaEvent,
        ToolCallDeltaEvent,
        ToolCallDeltaEvent,
        ResponseEvent,
    ]
    assert isinstance(events[-1], ResponseEvent)
    calls = events[-1].response.tool_calls
    deltas = [e for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert [c.tool_call_id for c in calls] == [d.tool_call_id for d in deltas]
    assert [json.loads(d.args_delta) for d in deltas] == [c.args for c in calls]


async def test_generic_fake_chat_model_streams_its_text_word_by_word() -> None:
    chat = GenericFakeChatModel(messages=iter(["It is sunny in Paris."]))
    events = [e async for e in LangChainModel(chat).stream(ask(nd.user("Weather?")))]
    texts = [e.delta for e in events if isinstance(e, TextDeltaEvent)]
    assert len(texts) > 1 and "".join(texts) == "It is sunny in Paris."
    assert isinstance(events[-1], ResponseEvent)
    assert events[-1].response.text == "It is sunny in Paris."


async def test_a_model_without_bind_tools_refuses_tools_clearly() -> None:
    chat = GenericFakeChatModel(messages=iter(["plain"]))
    model = LangChainModel(chat)
    assert (await model.generate(ask(nd.user("hi")))).text == "plain"  # no tools: fine
    with pytest.raises(nd.ConfigurationError, match="bind_tools"):
        await model.generate(ask(nd.user("hi"), tools=(WEATHER_TOOL,)))


def test_only_a_langchain_chat_model_is_accepted() -> None:
    with pytest.raises(nd.ConfigurationError, match="BaseChatModel"):
        LangChainModel(object())


def test_the_identity_comes_from_langchains_tracing_parameters() -> None:
    model = LangChainModel(FakeMessagesListChatModel(responses=[AIMessage(content="x")]))
    assert model.provider == "fakemessageslistchatmodel"
    assert model.model_name == model.model_id == "fake-messages-list-chat-model"
    assert model.price is None


async def test_callbacks_in_config_see_every_model_call() -> None:
    class Starts(AsyncCallbackHandler):
        def __init__(self) -> None:
            self.prompts: list[list[BaseMessage]] = []

        async def on_chat_model_start(
            self,
            serialized: dict[str, Any],
            messages: list[list[BaseMessage]],
            *,
            run_id: UUID,
            **kwargs: Any,
        ) -> None:
            self.prompts.extend(messages)

    handler = Starts()
    chat = fake(weather_call(), AIMessage(content="done"))
    model = LangChainModel(chat, config={"callbacks": [handler], "tags": ["nbdurable"]})
    await nd.generate_text(model=model, messages="Weather?", tools=[get_weather])
    assert len(handler.prompts) == 2  # both model calls of the run


# -- structured output ------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True], ids=["generate_text", "stream_chat"])
async def test_output_type_is_a_forced_answer_tool(streaming: bool) -> None:
    answer = AIMessage(
        content="",
        tool_calls=[{"name": "Forecast", "args": {"city": "Paris", "celsius": 18.5}, "id": "o1"}],
    )
    chat = fake(answer)
    kwargs: dict[str, Any] = {
        "model": LangChainModel(chat),
        "messages": "Paris?",
        "output_type": Forecast,
    }
    if streaming:
        result = await nd.stream_chat(**kwargs).result()
    else:
        result = await nd.generate_text(**kwargs)
    assert result.output == Forecast(city="Paris", celsius=18.5)
    assert result.messages[-1].tool_calls == ()  # the answer is text, not a call
    [bound] = chat.bound
    [tool] = bound["tools"]
    assert tool["function"]["name"] == "Forecast"
    assert tool["function"]["parameters"] == Forecast.model_json_schema()
    assert bound["tool_choice"] == "Forecast"  # alone: forced by name


async def test_output_type_beside_tools_requires_some_call() -> None:
    chat = fake(
        weather_call(),
        AIMessage(
            content="",
            tool_calls=[{"name": "Forecast", "args": {"city": "Paris", "celsius": 18}, "id": "o"}],
        ),
    )
    result = await nd.generate_text(
        model=LangChainModel(chat), messages="?", tools=[get_weather], output_type=Forecast
    )
    assert result.output == Forecast(city="Paris", celsius=18)
    assert [b["tool_choice"] for b in chat.bound] == ["any", "any"]
    assert [t["function"]["name"] for t in chat.bound[0]["tools"]] == ["get_weather", "Forecast"]


# -- ChatOpenAI over the wire -----------------------------------------------------------------


@pytest.fixture
def weather() -> Iterator[OpenAIServer]:
    with OpenAIServer(WEATHER) as server:
        yield server


def chat_openai(server: OpenAIServer) -> LangChainModel:
    langchain_openai = pytest.importorskip("langchain_openai")
    return LangChainModel(
        langchain_openai.ChatOpenAI(
            model="gpt-4o-mini",
            base_url=server.url,
            api_key=server.api_key,
            max_retries=0,
            stream_usage=True,
        )
    )


async def test_chat_openai_streams_tool_argument_fragments_with_their_ids(
    weather: OpenAIServer,
) -> None:
    model = chat_openai(weather)
    assert (model.provider, model.model_name) == ("openai", "gpt-4o-mini")
    assert model.price == price_for("gpt-4o-mini")
    request = ask(nd.user("Weather in Paris and Tokyo?"), tools=(WEATHER_TOOL,))
    events = [e async for e in model.stream(request)]
    assert [e.delta for e in events if isinstance(e, TextDeltaEvent)] == [
        "Let me",
        " check both cities.",
    ]
    assert [
        (e.tool_call_id, e.args_delta) for e in events if isinstance(e, ToolCallDeltaEvent)
    ] == [
        ("call_Pq7aW3paris", '{"ci'),
        ("call_Pq7aW3paris", 'ty": "Pa'),
        ("call_Pq7aW3paris", 'ris"}'),
        ("call_Zt9kD1tokyo", '{"city": '),
        ("call_Zt9kD1tokyo", '"Tokyo", "un'),
        ("call_Zt9kD1tokyo", 'it": "celsius"}'),
    ]
    assert isinstance(events[-1], ResponseEvent)
    streamed = events[-1].response
    generated = await model.generate(request)
    assert streamed == generated  # the same turn, streamed or not
    assert streamed.usage.cost == pytest.approx(expected_cost(WEATHER_USAGE_0))


@pytest.mark.parametrize("stream", [False, True], ids=["generate_text", "stream_chat"])
async def test_chat_openai_runs_a_conversation_with_images_over_the_wire(
    weather: OpenAIServer, stream: bool
) -> None:
    kwargs: dict[str, Any] = {
        "model": chat_openai(weather),
        "messages": [nd.user(["Weather in Paris and Tokyo?", PNG])],
        "tools": [get_weather],
        "instructions": "You are a weather bot.",
    }
    if stream:
        result = await nd.stream_chat(**kwargs).result()
    else:
        result = await nd.generate_text(**kwargs)
    assert result.text == WEATHER_ANSWER
    assert result.usage.cost == pytest.approx(
        expected_cost(WEATHER_USAGE_0) + expected_cost(WEATHER_USAGE_1)  # type: ignore[operator]
    )
    first = weather.requests[0]["messages"]
    assert first[0] == {"role": "system", "content": "You are a weather bot."}
    assert first[1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAAAAAAAAAAAAAAAAAAA"},
    }
    answered = weather.requests[1]["messages"]
    assert [m["role"] for m in answered] == ["system", "user", "assistant", "tool", "tool"]
    assert answered[2]["tool_calls"][0]["id"] == "call_Pq7aW3paris"
