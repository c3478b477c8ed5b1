"""OpenAIChatModel's errors: typed, with the provider's message, and never retried by the SDK."""

from __future__ import annotations

import socket
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.models import OpenAIChatModel
from nbdurable.models._base import ModelRequest, TextDeltaEvent

from .openai_server import ErrorReply, OpenAIServer, Stall, StreamError, chunk, text_reply

openai = pytest.importorskip("openai")

REQUEST = ModelRequest(messages=(nd.user("Hello"),))
RETRY = {"x-should-retry": "true", "retry-after-ms": "10"}  # the SDK would retry, if let

CASES = [
    (
        ErrorReply(429, "Rate limit reached for gpt-4o-mini on tokens per min (TPM).", "tokens",
                   "rate_limit_exceeded", RETRY),
        nd.RateLimitError,
        True,
    ),
    (
        ErrorReply(429, "You exceeded your current quota.", "insufficient_quota",
                   "insufficient_quota"),
        nd.RateLimitError,
        False,
    ),
    (ErrorReply(500, "The server had an error.", "server_error", None, RETRY),
     nd.ProviderUnavailableError, True),
    (ErrorReply(502, "Bad gateway.", "server_error"), nd.ProviderUnavailableError, True),
    (ErrorReply(503, "The engine is currently overloaded, please try again later.",
                "server_error", None, RETRY), nd.ProviderUnavailableError, True),
    (ErrorReply(504, "Gateway timeout.", "server_error"), nd.ProviderUnavailableError, True),
    (ErrorReply(529, "Overloaded", "overloaded_error"), nd.ProviderUnavailableError, True),
    (ErrorReply(400, "Invalid schema for response_format 'Weather'.", "invalid_request_error"),
     nd.InvalidRequestError, False),
    (ErrorReply(404, "The model `gpt-9` does not exist.", "invalid_request_error",
                "model_not_found"), nd.InvalidRequestError, False),
    (ErrorReply(413, "Request too large.", "invalid_request_error"), nd.InvalidRequestError,
     False),
    (ErrorReply(422, "Unprocessable entity.", "invalid_request_error"), nd.InvalidRequestError,
     False),
    (ErrorReply(403, "Project does not have access to model.", "invalid_request_error",
                "model_not_allowed"), nd.AuthenticationError, False),
]  # fmt: skip


def model_for(server: OpenAIServer, **kwargs: Any) -> OpenAIChatModel:
    return OpenAIChatModel("gpt-4o-mini", base_url=server.url, api_key=server.api_key, **kwargs)


async def call(model: OpenAIChatModel, streaming: bool) -> Any:
    if streaming:
        return [event async for event in model.stream(REQUEST)]
    return await model.generate(REQUEST)


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
@pytest.mark.parametrize(
    ("reply", "error", "retryable"), CASES, ids=[f"{c[0].status}-{c[0].type}" for c in CASES]
)
async def test_http_errors_are_typed_and_not_retried(
    reply: ErrorReply, error: type[nd.ProviderError], retryable: bool, streaming: bool
) -> None:
    with (
        OpenAIServer([reply, text_reply("never served")]) as server,
        pytest.raises(error) as caught,
    ):
        await call(model_for(server), streaming)
    assert len(server.requests) == 1  # the SDK did not retry
    exc = caught.value
    assert type(exc) is error
    assert exc.provider == "openai" and exc.status_code == reply.status
    assert exc.retryable is retryable
    assert reply.message in str(exc)
    assert isinstance(exc.__cause__, openai.APIStatusError)


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
async def test_a_wrong_key_is_an_authentication_error(streaming: bool) -> None:
    with OpenAIServer([text_reply("never served")], api_key="sk-right") as server:
        model = OpenAIChatModel("gpt-4o-mini", base_url=server.url, api_key="sk-wrong")
        with pytest.raises(nd.AuthenticationError, match="Incorrect API key") as caught:
            await call(model, streaming)
    assert caught.value.status_code == 401 and caught.value.retryable is False
    assert len(server.requests) == 1


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
async def test_a_stalled_server_is_a_timeout(streaming: bool) -> None:
    with OpenAIServer([Stall(10), text_reply("never served")]) as server:
        model = model_for(server, timeout=0.3)
        with pytest.raises(nd.ProviderTimeoutError) as caught:
            await call(model, streaming)
        await model.aclose()
    assert caught.value.retryable is True and caught.value.status_code is None
    assert caught.value.provider == "openai"
    assert isinstance(caught.value.__cause__, openai.APITimeoutError)
    assert len(server.requests) == 1


async def test_a_stream_that_stalls_midway_is_a_timeout() -> None:
    first = chunk({"role": "assistant", "content": "Let me"})
    with OpenAIServer([Stall(10, head=[first])]) as server:
        model = model_for(server, timeout=0.3)
        seen: list[Any] = []

        async def consume() -> None:
            async for event in model.stream(REQUEST):
                seen.append(event)

        with pytest.raises(nd.ProviderTimeoutError):
            await consume()
        await model.aclose()
    assert [e.delta for e in seen if isinstance(e, TextDeltaEvent)] == ["Let me"]
    assert len(server.requests) == 1


async def test_a_refused_connection_is_a_timeout_kind() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the call: nothing listens
    model = OpenAIChatModel("gpt-4o-mini", base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
    with pytest.raises(nd.ProviderTimeoutError, match="Connection error"):
        await model.generate(REQUEST)


async def test_an_error_event_mid_stream_after_some_text() -> None:
    first = chunk({"role": "assistant", "content": "Let me"})
    failure = StreamError([first], "The server had an error while processing your request.")
    with OpenAIServer([failure]) as server:
        seen: list[Any] = []

        async def consume() -> None:
            async for event in model_for(server).stream(REQUEST):
                seen.append(event)

        with pytest.raises(nd.ProviderUnavailableError, match="processing your request"):
            await consume()
    assert [e.delta for e in seen if isinstance(e, TextDeltaEvent)] == ["Let me"]
    assert len(server.requests) == 1


async def test_a_client_passed_in_does_not_retry_either() -> None:
    with OpenAIServer([ErrorReply(500, "boom", "server_error", None, RETRY)]) as server:
        client = openai.AsyncOpenAI(api_key=server.api_key, base_url=server.url, max_retries=5)
        with pytest.raises(nd.ProviderUnavailableError):
            await OpenAIChatModel("gpt-4o-mini", client=client).generate(REQUEST)
        await client.close()
    assert len(server.requests) == 1


async def test_the_loop_raises_the_typed_error() -> None:
    reply = ErrorReply(400, "messages: too long", "invalid_request_error")
    with OpenAIServer([reply, reply]) as server:
        with pytest.raises(nd.InvalidRequestError, match="too long"):
            await nd.generate_text(model=model_for(server), messages="Hi")
        stream = nd.stream_chat(model=model_for(server), messages="Hi")
        with pytest.raises(nd.InvalidRequestError, match="too long"):
            await stream.text
    assert len(server.requests) == 2
