"""OpenAIChatModel under the loop's structured output and the DurableRuntime, over the wire."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

import nbdurable as nd
from nbdurable.models import OpenAIChatModel

from .openai_server import WEATHER, WEATHER_ANSWER, ErrorReply, OpenAIServer, text_reply
from .test_openai import get_weather

pytest.importorskip("openai")


class Forecast(BaseModel):
    city: str
    celsius: float
    note: str | None = None


class Tagged(BaseModel):
    tags: dict[str, int]


def model_for(server: OpenAIServer) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", base_url=server.url, api_key=server.api_key)


@pytest.mark.parametrize("streaming", [False, True], ids=["generate_text", "stream_chat"])
async def test_output_type_sends_a_strict_schema_and_validates_the_json(streaming: bool) -> None:
    answer = '{"city": "Paris", "celsius": 18.5, "note": null}'
    with OpenAIServer([text_reply(answer)]) as server:
        kwargs = {"model": model_for(server), "messages": "Paris?", "output_type": Forecast}
        if streaming:
            result = await nd.stream_chat(**kwargs).result()  # type: ignore[arg-type]
        else:
            result = await nd.generate_text(**kwargs)  # type: ignore[arg-type]
    assert result.output == Forecast(city="Paris", celsius=18.5)
    sent = server.requests[0]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["strict"] is True
    assert sent["json_schema"]["name"] == "Forecast"
    schema = sent["json_schema"]["schema"]
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["city", "celsius", "note"]  # strict mode: every field


async def test_an_open_object_schema_is_sent_without_strict() -> None:
    with OpenAIServer([text_reply('{"tags": {"a": 1}}')]) as server:
        result = await nd.generate_text(
            model=model_for(server), messages="Tags?", output_type=Tagged
        )
    assert result.output == Tagged(tags={"a": 1})
    sent = server.requests[0]["response_format"]["json_schema"]
    assert sent["strict"] is False and sent["schema"] == Tagged.model_json_schema()


async def test_invalid_json_is_an_output_validation_error() -> None:
    with (
        OpenAIServer([text_reply("Paris is nice.")]) as server,
        pytest.raises(nd.OutputValidationError),
    ):
        await nd.generate_text(model=model_for(server), messages="Paris?", output_type=Forecast)


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
async def test_a_durable_runtime_run_completes(tmp_path: Path, stream: bool) -> None:
    with OpenAIServer(WEATHER) as server:
        agent = nd.Agent(
            "weather",
            model_for(server),
            [get_weather],
            "You are a weather bot.",
            version="1",
            stream=stream,
            tool_recovery={"get_weather": "safe"},
        )
        store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
        try:
            async with await nd.DurableRuntime.open(store=store, agents=[agent]) as runtime:
                run = await runtime.submit("weather", "Weather in Paris and Tokyo?")
                result = await run.result()
            saved = store.load(run.run_id)
        finally:
            store.close()
    assert result.text == WEATHER_ANSWER
    assert result.usage.input_tokens == 152 + 231 and result.usage.cost is not None
    assert [c.tool_call_id for c in saved.messages[1].tool_calls] == [
        "call_Pq7aW3paris",
        "call_Zt9kD1tokyo",
    ]
    assert server.requests[0]["messages"][0] == {
        "role": "system",
        "content": "You are a weather bot.",
    }
    assert len(server.requests) == 2


async def test_the_runtime_retries_a_503_itself(tmp_path: Path) -> None:
    overloaded = ErrorReply(503, "The engine is currently overloaded.", "server_error")
    script = [overloaded, text_reply("Hello after a retry.")]
    with OpenAIServer(script) as server:
        agent = nd.Agent(
            "hello",
            model_for(server),
            version="1",
            model_retry=nd.ModelRetry(max_attempts=3, initial_delay_ms=10),
            retry_if=nd.is_retryable,
        )
        store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
        try:
            async with await nd.DurableRuntime.open(store=store, agents=[agent]) as runtime:
                result = await (await runtime.submit("hello", "Hi")).result()
        finally:
            store.close()
    assert result.text == "Hello after a retry."
    assert len(server.requests) == 2  # one failed attempt, counted by the runtime, one success


async def test_the_runtime_does_not_retry_a_400_with_is_retryable(tmp_path: Path) -> None:
    bad = ErrorReply(400, "Invalid 'messages'.", "invalid_request_error")
    with OpenAIServer([bad, text_reply("never served")]) as server:
        agent = nd.Agent(
            "bad",
            model_for(server),
            version="1",
            model_retry=nd.ModelRetry(max_attempts=3, initial_delay_ms=10),
            retry_if=nd.is_retryable,
        )
        store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
        try:
            async with await nd.DurableRuntime.open(store=store, agents=[agent]) as runtime:
                run = await runtime.submit("bad", "Hi")
                with pytest.raises(nd.RunFailedError):
                    await run.result()
        finally:
            store.close()
    assert len(server.requests) == 1
