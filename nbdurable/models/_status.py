"""Provider failures read off any exception: HTTP status, quota, transport (framework adapters)."""

from __future__ import annotations

import asyncio
import sys
from typing import NoReturn

from .._errors import (
    AuthenticationError,
    ConfigurationError,
    InvalidRequestError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)

__all__ = [
    "closed_loop_error",
    "error_for_status",
    "is_transport_failure",
    "quota_exhausted",
    "reraise",
    "status_of",
]

_BY_STATUS: dict[int, type[ProviderError]] = {
    401: AuthenticationError,
    403: AuthenticationError,
    408: ProviderTimeoutError,
    409: ProviderUnavailableError,
    429: RateLimitError,
    529: ProviderUnavailableError,
}


def error_for_status(status: int | None, text: str, provider: str) -> ProviderError:
    """The typed error for an HTTP status.

    429 rate limit, 401/403 authentication, 408 timeout, 5xx/409/529 unavailable,
    other 4xx invalid request; no status, a plain :class:`ProviderError`.
    """
    if status is None:
        return ProviderError(text, provider=provider)
    cls = _BY_STATUS.get(status)
    if cls is None and status >= 500:
        cls = ProviderUnavailableError
    elif cls is None and 400 <= status < 500:
        cls = InvalidRequestError
    return (cls or ProviderError)(text, provider=provider, status_code=status)


# Transport failures by class name (httpx, httpx2, aiohttp, requests, the provider
# SDKs' connection errors), for SDKs that are not imported here.
_TRANSPORT_NAMES = frozenset(
    {
        "APIConnectionError",
        "APITimeoutError",
        "ConnectError",
        "ConnectTimeout",
        "ConnectionError",
        "NetworkError",
        "PoolTimeout",
        "ReadError",
        "ReadTimeout",
        "RemoteProtocolError",
        "ServerDisconnectedError",
        "TimeoutException",
        "TransportError",
        "WriteError",
        "WriteTimeout",
    }
)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries, if any.

    Read from ``status_code``, ``response.status_code``, ``status`` or an HTTP-like ``code``.
    """
    for value in (
        getattr(exc, "status_code", None),
        getattr(getattr(exc, "response", None), "status_code", None),
        getattr(exc, "status", None),
        getattr(exc, "code", None),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    return None


def quota_exhausted(exc: BaseException) -> bool:
    """Whether a 429 says the account's quota is used up (OpenAI's ``insufficient_quota``)."""
    body = getattr(exc, "body", None)
    codes = [getattr(exc, "code", None), getattr(exc, "type", None)]
    if isinstance(body, dict):
        codes += [body.get("code"), body.get("type")]
    return any(isinstance(c, str) and "insufficient_quota" in c for c in codes)


def is_transport_failure(exc: BaseException) -> bool:
    """A timeout or a refused, reset or broken connection, of any HTTP client or SDK."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    for name in ("httpx", "httpx2"):
        http = sys.modules.get(name)
        if http is not None and isinstance(exc, (http.TimeoutException, http.TransportError)):
            return True
    return any(cls.__name__ in _TRANSPORT_NAMES for cls in type(exc).__mro__)


def reraise(exc: Exception, mapped: ProviderError | None, model: str) -> NoReturn:
    """Raise what ``exc`` means: a closed loop's error, else ``mapped``, else ``exc`` itself."""
    error = closed_loop_error(exc, model) or mapped
    if error is None:
        raise exc
    raise error from exc


def closed_loop_error(exc: BaseException, model: str) -> ConfigurationError | None:
    """A clear error for a framework's HTTP client used after its event loop closed.

    A wrapped model's client belongs to the event loop it first ran on; a second
    ``asyncio.run`` in a script meets it closed. The adapter cannot open a new
    client for another framework's model, so it says what to do instead.
    """
    if isinstance(exc, RuntimeError) and "Event loop is closed" in str(exc):
        return ConfigurationError(
            f"{model}: the wrapped model's HTTP client belongs to an event loop that has"
            " closed (a second asyncio.run?); create the model inside the loop that uses it"
        )
    return None
