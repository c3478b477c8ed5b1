"""Exceptions raised through a LangChain chat model as nbdurable's typed provider errors.

A LangChain integration raises its provider SDK's exceptions (``openai.RateLimitError``,
``anthropic.APIStatusError``, ``httpx`` errors, ...), in langchain-core 1.x also
classified under ``langchain_core.exceptions.ModelError``. Both are read here
without importing any provider SDK: the LangChain classification first, then an
HTTP status on the exception or its ``response``, then timeouts and broken
connections by type.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from .._errors import (
    AuthenticationError,
    InvalidRequestError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)
from ._status import error_for_status

__all__ = ["map_exception", "status_of"]

# langchain_core.exceptions' classification (1.x), most specific first.
_CATEGORIES: tuple[tuple[str, type[ProviderError]], ...] = (
    ("ModelRateLimitError", RateLimitError),
    ("ModelAuthenticationError", AuthenticationError),
    ("ModelPermissionDeniedError", AuthenticationError),
    ("ContextOverflowError", InvalidRequestError),
    ("ModelNotFoundError", InvalidRequestError),
    ("ModelInvalidRequestError", InvalidRequestError),
    ("ModelRefusalError", InvalidRequestError),
    ("ModelTimeoutError", ProviderTimeoutError),
    ("ModelConnectionError", ProviderTimeoutError),
    ("ModelAPIError", ProviderUnavailableError),
)

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


def _quota_exhausted(exc: BaseException) -> bool:
    body = getattr(exc, "body", None)
    codes = [getattr(exc, "code", None), getattr(exc, "type", None)]
    if isinstance(body, dict):
        codes += [body.get("code"), body.get("type")]
    return any(isinstance(c, str) and "insufficient_quota" in c for c in codes)


def _is_transport(exc: BaseException) -> bool:
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    for name in ("httpx", "httpx2"):
        http = sys.modules.get(name)
        if http is not None and isinstance(exc, (http.TimeoutException, http.TransportError)):
            return True
    return any(cls.__name__ in _TRANSPORT_NAMES for cls in type(exc).__mro__)


def map_exception(exc: BaseException, exceptions: Any, provider: str) -> ProviderError | None:
    """Our error for an exception raised through a chat model, else None.

    None means it is not a provider failure (a bug in a callback, a ``ValueError``
    of the integration, ...): it is raised as it is.

    Args:
        exc: What ``ainvoke`` or ``astream`` raised.
        exceptions: The ``langchain_core.exceptions`` module.
        provider: The chat model's provider name, for the error.
    """
    status = status_of(exc)
    text = f"{provider}: {exc}"
    for name, cls in _CATEGORIES:
        category = getattr(exceptions, name, None)
        if category is not None and isinstance(exc, category):
            retryable = False if cls is RateLimitError and _quota_exhausted(exc) else None
            return cls(text, provider=provider, status_code=status, retryable=retryable)
    if status is not None:
        error = error_for_status(status, text, provider)
        if isinstance(error, RateLimitError) and _quota_exhausted(exc):
            error.retryable = False
        return error
    if _is_transport(exc):
        return ProviderTimeoutError(text, provider=provider)
    return None
