"""An HTTP status as one of our typed provider errors (for the framework adapters)."""

from __future__ import annotations

from .._errors import (
    AuthenticationError,
    InvalidRequestError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)

__all__ = ["error_for_status"]

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
