"""Anthropic SDK exceptions as nbdurable's typed provider errors."""

from __future__ import annotations

from typing import Any

from .._errors import (
    AuthenticationError,
    InvalidRequestError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)

__all__ = ["PROVIDER", "map_exception"]

PROVIDER = "anthropic"

_BY_STATUS: dict[int, type[ProviderError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: InvalidRequestError,
    408: ProviderTimeoutError,
    413: InvalidRequestError,
    422: InvalidRequestError,
    429: RateLimitError,
    529: ProviderUnavailableError,
}

# Anthropic's error ``type``s (https://docs.anthropic.com/en/api/errors), for errors
# that arrive without an error status: an ``error`` event inside an SSE stream.
_BY_TYPE: dict[str, type[ProviderError]] = {
    "invalid_request_error": InvalidRequestError,
    "not_found_error": InvalidRequestError,
    "request_too_large": InvalidRequestError,
    "authentication_error": AuthenticationError,
    "permission_error": AuthenticationError,
    "rate_limit_error": RateLimitError,
    "api_error": ProviderUnavailableError,
    "overloaded_error": ProviderUnavailableError,
    "timeout_error": ProviderTimeoutError,
}


def _error_of(body: Any) -> tuple[str | None, str | None]:
    """``(type, message)`` of Anthropic's error body ``{"type": "error", "error": {...}}``."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None, None
    kind, message = error.get("type"), error.get("message")
    return (
        kind if isinstance(kind, str) else None,
        message if isinstance(message, str) else None,
    )


def _error(status: int | None, body: Any, fallback: str) -> ProviderError:
    kind, message = _error_of(body)
    cls: type[ProviderError] | None = None
    if status is not None and status >= 400:
        cls = _BY_STATUS.get(status) or (ProviderUnavailableError if status >= 500 else None)
    if cls is None and kind is not None:
        cls = _BY_TYPE.get(kind)
    where = f"HTTP {status}" if status is not None and status >= 400 else "in the stream"
    text = f"Anthropic error {where}" + (f" ({kind})" if kind else "")
    text += f": {message or fallback}"
    code = status if status is not None and status >= 400 else None
    return (cls or ProviderError)(text, provider=PROVIDER, status_code=code)


def map_exception(exc: BaseException, anthropic: Any, httpx: Any) -> ProviderError | None:
    """The typed error for an exception of the SDK (or its HTTP client), else None.

    Args:
        exc: The exception raised by a call or while reading its stream.
        anthropic: The ``anthropic`` module.
        httpx: The HTTP client module the SDK uses (``httpx2`` or ``httpx``), or None.
    """
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderTimeoutError(f"Anthropic request timed out: {exc}", provider=PROVIDER)
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderTimeoutError(f"Anthropic connection failed: {exc}", provider=PROVIDER)
    if isinstance(exc, anthropic.APIStatusError):
        return _error(exc.status_code, exc.body, str(exc))
    if isinstance(exc, anthropic.APIError):
        return ProviderError(f"Anthropic error: {exc}", provider=PROVIDER)
    if httpx is not None and isinstance(exc, httpx.TimeoutException):
        return ProviderTimeoutError(f"Anthropic stream timed out: {exc!r}", provider=PROVIDER)
    if httpx is not None and isinstance(exc, httpx.TransportError):
        return ProviderTimeoutError(f"Anthropic stream broke off: {exc!r}", provider=PROVIDER)
    return None
