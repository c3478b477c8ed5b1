"""Exceptions raised through LangChain chat models become nbdurable's typed provider errors:
the provider SDK's errors from ChatOpenAI over the wire, and real langchain-core, httpx and
built-in exceptions raised inside a fake chat model, in calls and in streams."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest

pytest.importorskip("langchain_core")

from langchain_core import exceptions as lc
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult

import nbdurable as nd
from nbdurable.models import LangChainModel
from nbdurable.models._base import ModelRequest

from .openai_server import ErrorReply, OpenAIServer, Stall, text_reply

ASK = ModelRequest(messages=(nd.user("hi"),))


def chat_openai(url: str, **kwargs: Any) -> LangChainModel:
    langchain_openai = pytest.importorskip("langchain_openai")
    return LangChainModel(
        langchain_openai.ChatOpenAI(
            model="gpt-4o-mini", base_url=url, api_key="sk-loopback", max_retries=0, **kwargs
        )
    )


async def call(model: LangChainModel, stream: bool) -> None:
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
async def test_provider_http_errors_are_typed_by_status(
    reply: ErrorReply, kind: type[nd.ProviderError], retryable: bool, stream: bool
) -> None:
    with OpenAIServer([reply]) as server, pytest.raises(kind) as caught:
        await call(chat_openai(server.url), stream)
    error = caught.value
    assert (error.status_code, error.retryable, error.provider) == (
        reply.status,
        retryable,
        "openai",
    )
    assert nd.is_retryable(error) is retryable
    assert type(error.__cause__).__module__.startswith("langchain_openai")  # the original, kept


async def test_a_refused_connection_and_a_timeout_are_timeout_errors() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(nd.ProviderTimeoutError):
        await chat_openai(f"http://127.0.0.1:{port}/v1").generate(ASK)
    with (
        OpenAIServer([Stall(5.0, then=text_reply("late"))]) as server,
        pytest.raises(nd.ProviderTimeoutError),
    ):
        await chat_openai(server.url, timeout=0.3).generate(ASK)


class RaisingFake(FakeMessagesListChatModel):
    """LangChain's fake chat model, failing with a given exception (in calls and streams)."""

    error: Any = None

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise self.error


def raising(error: BaseException) -> LangChainModel:
    return LangChainModel(RaisingFake(responses=[AIMessage(content="never")], error=error))


REQUEST = httpx.Request("POST", "https://api.example.org/v1/chat")


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
@pytest.mark.parametrize(
    ("error", "kind", "status"),
    [
        (lc.ModelRateLimitError("slow down"), nd.RateLimitError, None),
        (lc.ModelAuthenticationError("bad key"), nd.AuthenticationError, None),
        (lc.ModelPermissionDeniedError("not yours"), nd.AuthenticationError, None),
        (lc.ModelInvalidRequestError("bad request"), nd.InvalidRequestError, None),
        (lc.ModelNotFoundError("no such model"), nd.InvalidRequestError, None),
        (lc.ContextOverflowError("too long"), nd.InvalidRequestError, None),
        (lc.ModelAPIError("upstream 502"), nd.ProviderUnavailableError, None),
        (lc.ModelConnectionError("unreachable"), nd.ProviderTimeoutError, None),
        (lc.ModelTimeoutError("too slow"), nd.ProviderTimeoutError, None),
        (
            httpx.HTTPStatusError(
                "503", request=REQUEST, response=httpx.Response(503, request=REQUEST)
            ),
            nd.ProviderUnavailableError,
            503,
        ),
        (
            httpx.HTTPStatusError(
                "429", request=REQUEST, response=httpx.Response(429, request=REQUEST)
            ),
            nd.RateLimitError,
            429,
        ),
        (httpx.ReadTimeout("read timed out", request=REQUEST), nd.ProviderTimeoutError, None),
        (httpx.ConnectError("connection refused", request=REQUEST), nd.ProviderTimeoutError, None),
        (TimeoutError("deadline"), nd.ProviderTimeoutError, None),
        (ConnectionResetError("reset by peer"), nd.ProviderTimeoutError, None),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else None,
)
async def test_langchain_and_transport_exceptions_map_onto_ours(
    error: BaseException, kind: type[nd.ProviderError], status: int | None, stream: bool
) -> None:
    with pytest.raises(kind) as caught:
        await call(raising(error), stream)
    assert caught.value.status_code == status
    cause = caught.value.__cause__
    # the original (asyncio re-creates a TimeoutError crossing from LangChain's executor thread)
    assert type(cause) is type(error) and cause.args == error.args


@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
async def test_a_bug_is_not_dressed_as_a_provider_error(stream: bool) -> None:
    with pytest.raises(KeyError, match="oops"):
        await call(raising(KeyError("oops")), stream)


def test_a_client_left_on_a_closed_event_loop_is_a_clear_configuration_error() -> None:
    """ChatOpenAI's HTTP client stays on the loop it first ran on: a second loop says so.

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
        model = chat_openai(server.url)
        assert run_on_a_new_loop(model.generate(ASK)).text == "one"
        with pytest.raises(nd.ConfigurationError, match="inside the loop that uses it"):
            run_on_a_new_loop(model.generate(ASK))
