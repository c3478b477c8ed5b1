"""AnthropicModel errors: HTTP errors, an error event mid-stream, timeouts; no SDK retries."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.tiers import skip_without

import nbdurable as nd
from nbdurable.models import ModelRequest, TextDeltaEvent
from nbdurable.models._anthropic import AnthropicModel

from .anthropic_server import (
    AnthropicServer,
    Error,
    Stall,
    StreamError,
    Truncated,
    message,
    text,
)

skip_without("anthropic", reason="the anthropic extra is not installed")

MODEL = "claude-haiku-4-5"
REQUEST = ModelRequest(messages=(nd.user("hi"),))


@pytest.fixture
async def served() -> AsyncIterator[tuple[AnthropicServer, AnthropicModel]]:
    server = AnthropicServer().start()
    model = AnthropicModel(MODEL, api_key="sk-ant-test", base_url=server.url)
    yield server, model
    await model.aclose()
    server.stop()


async def call(model: AnthropicModel, streaming: bool) -> list[Any]:
    if not streaming:
        return [await model.generate(REQUEST)]
    return [event async for event in model.stream(REQUEST)]


async def drain(model: AnthropicModel, seen: list[Any]) -> None:
    async for event in model.stream(REQUEST):
        seen.append(event)


CASES = [
    ("rate_limit_error", 429, nd.RateLimitError, True),
    ("overloaded_error", 529, nd.ProviderUnavailableError, True),
    ("api_error", 500, nd.ProviderUnavailableError, True),
    ("api_error", 503, nd.ProviderUnavailableError, True),
    ("invalid_request_error", 400, nd.InvalidRequestError, False),
    ("not_found_error", 404, nd.InvalidRequestError, False),
    ("request_too_large", 413, nd.InvalidRequestError, False),
    ("invalid_request_error", 422, nd.InvalidRequestError, False),
    ("authentication_error", 401, nd.AuthenticationError, False),
    ("permission_error", 403, nd.AuthenticationError, False),
]


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
@pytest.mark.parametrize(("kind", "status", "error", "retryable"), CASES)
async def test_http_errors_are_typed_and_not_retried_by_the_sdk(
    served: Any, streaming: bool, kind: str, status: int, error: type, retryable: bool
) -> None:
    server, model = served
    server.add(Error(kind, f"provider says {kind}", status=status), message(text("unused")))
    with pytest.raises(error) as caught:
        await call(model, streaming)
    exc = caught.value
    assert exc.provider == "anthropic" and exc.status_code == status
    assert exc.retryable is retryable
    assert f"provider says {kind}" in str(exc) and kind in str(exc)
    assert len(server.requests) == 1  # the SDK did not retry
    import anthropic

    assert isinstance(exc.__cause__, anthropic.APIStatusError)


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("overloaded_error", nd.ProviderUnavailableError),
        ("rate_limit_error", nd.RateLimitError),
        ("api_error", nd.ProviderUnavailableError),
        ("invalid_request_error", nd.InvalidRequestError),
    ],
)
async def test_an_error_event_mid_stream_is_typed(served: Any, kind: str, error: type) -> None:
    server, model = served
    server.add(StreamError(kind, "Overloaded"), message(text("unused")))
    seen: list[Any] = []
    with pytest.raises(error) as caught:
        await drain(model, seen)
    assert [e.delta for e in seen if isinstance(e, TextDeltaEvent)] == ["Let me"]
    assert caught.value.provider == "anthropic" and "Overloaded" in str(caught.value)
    assert kind in str(caught.value) and caught.value.status_code is None
    assert len(server.requests) == 1


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
async def test_a_stalled_server_is_a_timeout(served: Any, streaming: bool) -> None:
    server, _ = served
    impatient = AnthropicModel(MODEL, api_key="k", base_url=server.url, timeout=0.3)
    server.add(Stall(30), message(text("unused")))
    started = time.monotonic()
    with pytest.raises(nd.ProviderTimeoutError) as caught:
        await call(impatient, streaming)
    await impatient.aclose()
    assert time.monotonic() - started < 10
    assert caught.value.retryable is True and caught.value.provider == "anthropic"
    assert len(server.requests) == 1


async def test_a_stream_that_stalls_midway_is_a_timeout(served: Any) -> None:
    server, _ = served
    impatient = AnthropicModel(MODEL, api_key="k", base_url=server.url, timeout=0.3)
    server.add(Stall(30, mid_stream=True))
    seen: list[Any] = []
    with pytest.raises(nd.ProviderTimeoutError) as caught:
        await drain(impatient, seen)
    await impatient.aclose()
    assert [e.delta for e in seen if isinstance(e, TextDeltaEvent)] == ["Let me"]
    assert caught.value.retryable is True and len(server.requests) == 1


async def test_a_stream_cut_off_before_message_stop_is_a_broken_connection(served: Any) -> None:
    server, model = served
    server.add(Truncated())
    seen: list[Any] = []
    with pytest.raises(nd.ProviderTimeoutError, match="message_stop"):
        await drain(model, seen)
    assert [e.delta for e in seen if isinstance(e, TextDeltaEvent)] == ["Let me"]


def test_a_model_follows_the_event_loop(served: Any) -> None:
    server, _ = served
    server.add(message(text("one")), message(text("two")))
    model = AnthropicModel(MODEL, api_key="k", base_url=server.url)
    first = asyncio.run(model.generate(REQUEST))
    second = asyncio.run(model.generate(REQUEST))  # a new loop: a new client
    assert (first.text, second.text) == ("one", "two")


async def test_a_refused_connection_is_a_timeout_kind() -> None:
    server = AnthropicServer().start()
    url = server.url
    server.stop()  # nothing listens there any more
    model = AnthropicModel(MODEL, api_key="k", base_url=url)
    with pytest.raises(nd.ProviderTimeoutError, match="connection"):
        await model.generate(REQUEST)
    await model.aclose()


async def test_a_passed_client_gets_its_retries_turned_off(served: Any) -> None:
    import anthropic

    server, _ = served
    client = anthropic.AsyncAnthropic(api_key="k", base_url=server.url, max_retries=5)
    model = AnthropicModel(MODEL, client=client)
    assert model.client.max_retries == 0 and client.max_retries == 5
    server.add(Error("overloaded_error", "Overloaded"), message(text("unused")))
    with pytest.raises(nd.ProviderUnavailableError):
        await model.generate(REQUEST)
    assert len(server.requests) == 1
    await client.close()


def test_a_sync_client_is_refused() -> None:
    import anthropic

    with pytest.raises(nd.ConfigurationError, match="AsyncAnthropic"):
        AnthropicModel(MODEL, client=anthropic.Anthropic(api_key="k"))


def test_without_the_sdk_the_class_is_named_and_creating_one_says_which_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['anthropic'] = None\n"  # as if the extra were not installed
        "import nbdurable as nd\n"
        "from nbdurable.models._anthropic import AnthropicModel\n"
        "try:\n"
        "    AnthropicModel('claude-haiku-4-5')\n"
        "except nd.ConfigurationError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "nbdurable[anthropic]" in out.stdout
