"""Pydantic AI's real exceptions become nbdurable's typed provider errors: raised over the wire
by its OpenAIChatModel, and raised as such inside a FunctionModel, in calls and in streams."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import exceptions as pai
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel as PaiOpenAI
from pydantic_ai.providers.openai import OpenAIProvider

import nbdurable as nd
from nbdurable.models import PydanticAIModel
from nbdurable.models._base import ModelRequest

from .openai_server import ErrorReply, OpenAIServer, Stall, text_reply

ASK = ModelRequest(messages=(nd.user("hi"),))


def over_the_wire(url: str, **settings: Any) -> PydanticAIModel:
    provider = OpenAIProvider(base_url=url, api_key="sk-loopback")
    return PydanticAIModel(PaiOpenAI("gpt-4o-mini", provider=provider), settings=settings)


async def call(model: PydanticAIModel, stream: bool) -> None:
    if stream:
        [e async for e in model.stream(ASK)]
    else:
        await model.generate(ASK)


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
@pytest.mark.parametrize(
    ("reply", "kind", "retryable"),
    [
        (
            ErrorReply(429, "Rate limit reached", "requests", "rate_limit_exceeded"),
            nd.RateLimitError,
            True,
        ),
        (
            ErrorReply(429, "You exceeded your quota", "insufficient_quota", "insufficient_quota"),
            nd.RateLimitError,
            False,
        ),
        (
            ErrorReply(500, "The server had an error", "server_error"),
            nd.ProviderUnavailableError,
            True,
        ),
        (ErrorReply(503, "Overloaded", "server_error"), nd.ProviderUnavailableError, True),
        (
            ErrorReply(401, "Incorrect API key", code="invalid_api_key"),
            nd.AuthenticationError,
            False,
        ),
        (ErrorReply(403, "Not allowed", "permission_error"), nd.AuthenticationError, False),
        (ErrorReply(400, "Invalid 'messages'"), nd.InvalidRequestError, False),
        (
            ErrorReply(404, "The model does not exist", code="model_not_found"),
            nd.InvalidRequestError,
            False,
        ),
    ],
    ids=["429", "quota", "500", "503", "401", "403", "400", "404"],
)
async def test_http_errors_are_typed_by_status(
    reply: ErrorReply, kind: type[nd.ProviderError], retryable: bool, stream: bool
) -> None:
    with OpenAIServer([reply]) as server, pytest.raises(kind) as caught:
        await call(over_the_wire(server.url), stream)
    error = caught.value
    assert (error.status_code, error.retryable, error.provider) == (
        reply.status,
        retryable,
        "openai",
    )
    assert isinstance(error.__cause__, pai.ModelAPIError)  # Pydantic AI's, kept as the cause
    assert nd.is_retryable(error) is retryable


async def test_a_refused_connection_is_a_timeout_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(nd.ProviderTimeoutError) as caught:
        await over_the_wire(f"http://127.0.0.1:{port}/v1").generate(ASK)
    assert isinstance(caught.value.__cause__, pai.ModelConnectionError)
    assert caught.value.retryable


async def test_a_request_past_its_timeout_is_a_timeout_error() -> None:
    with OpenAIServer([Stall(5.0, then=text_reply("late"))] * 2) as server:
        with pytest.raises(nd.ProviderTimeoutError):
            await over_the_wire(server.url, timeout=0.3).generate(ASK)
        with pytest.raises(nd.ProviderTimeoutError):
            await over_the_wire(server.url, request_timeout=0.3).generate(ASK)


def raising(error: BaseException) -> FunctionModel:
    def function(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise error

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "partial "
        raise error

    return FunctionModel(function, stream_function=stream)


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
@pytest.mark.parametrize(
    ("error", "kind", "status"),
    [
        (pai.ModelHTTPError(429, "m", body={"error": "slow"}), nd.RateLimitError, 429),
        (pai.ModelHTTPError(529, "m"), nd.ProviderUnavailableError, 529),
        (pai.ModelHTTPError(408, "m"), nd.ProviderTimeoutError, 408),
        (pai.ModelHTTPError(422, "m"), nd.InvalidRequestError, 422),
        (pai.ModelRateLimitError("m", "slow down"), nd.RateLimitError, None),
        (pai.ModelQuotaExceededError("m", "no credit"), nd.RateLimitError, None),
        (pai.ModelOverloadedError("m", "overloaded"), nd.ProviderUnavailableError, None),
        (pai.ModelTimeoutError("m", "read timed out", phase="read"), nd.ProviderTimeoutError, None),
        (pai.ModelRequestTimeout("m", 30.0), nd.ProviderTimeoutError, None),
        (pai.ModelContextWindowExceededError("m", "too long"), nd.InvalidRequestError, None),
        (
            pai.UnexpectedModelBehavior("Received empty model response"),
            nd.ProviderUnavailableError,
            None,
        ),
        (pai.ContentFilterError("Content filter triggered"), nd.InvalidRequestError, None),
        (pai.UserError("this model does not support tools"), nd.InvalidRequestError, None),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
async def test_pydantic_ai_exceptions_map_onto_ours(
    error: BaseException, kind: type[nd.ProviderError], status: int | None, stream: bool
) -> None:
    with pytest.raises(kind) as caught:
        await call(PydanticAIModel(raising(error)), stream)
    assert caught.value.status_code == status
    assert caught.value.__cause__ is error
    if isinstance(error, pai.ModelQuotaExceededError):
        assert caught.value.retryable is False  # waiting does not refill a quota


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
async def test_a_bug_in_the_wrapped_model_is_not_dressed_as_a_provider_error(stream: bool) -> None:
    with pytest.raises(KeyError, match="oops"):
        await call(PydanticAIModel(raising(KeyError("oops"))), stream)


async def test_retry_if_is_retryable_retries_a_503_and_fails_a_401_at_once(tmp_path: Any) -> None:
    """The runtime's model retry reads the mapped errors (only when asked to: by default every error is retried alike)."""
    answers: list[BaseException | str] = [pai.ModelHTTPError(503, "m"), "recovered"]

    def flaky(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return ModelResponse(parts=[TextPart(answer)])

    def denied(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise pai.ModelHTTPError(401, "m")

    retry = nd.ModelRetry(max_attempts=3, initial_delay_ms=1, max_delay_ms=1)
    agents = [
        nd.Agent(
            name,
            PydanticAIModel(FunctionModel(fn)),
            version="1",
            model_retry=retry,
            retry_if=nd.is_retryable,
        )
        for name, fn in (("flaky", flaky), ("denied", denied))
    ]
    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    async with await nd.DurableRuntime.open(store=store, agents=agents) as runtime:
        ok = await runtime.submit("flaky", "hi")
        assert (await ok.result()).text == "recovered"
        failed = await runtime.submit("denied", "hi")
        with pytest.raises(nd.RunFailedError):
            await failed.result()
        events = await nd.read_events(store, failed.run_id)
        assert sum(e.type == "model_attempt_failed" for e in events) == 1  # not retried


def test_a_client_left_on_a_closed_event_loop_is_a_clear_configuration_error() -> None:
    """Pydantic AI's HTTP client stays on the loop it first ran on: a second loop says so.

    Loops of the test's own, not ``asyncio.run``: a notebook test in this process
    may have applied nest_asyncio2, whose ``asyncio.run`` reuses one loop.
    """
    import asyncio

    def run_on_a_new_loop(coro: Any) -> Any:
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(coro)
        finally:
            loop.close()

    with OpenAIServer([text_reply("one"), text_reply("two")]) as server:
        model = over_the_wire(server.url)
        assert run_on_a_new_loop(model.generate(ASK)).text == "one"
        with pytest.raises(nd.ConfigurationError, match="inside the loop that uses it"):
            run_on_a_new_loop(model.generate(ASK))
