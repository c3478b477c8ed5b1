"""Pydantic AI's model exceptions as nbdurable's typed provider errors."""

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
from ._status import error_for_status, is_transport_failure, status_of

__all__ = ["map_exception"]

# Pydantic AI's error categories, most specific first (a class may inherit from two:
# an HTTP 429 is a ModelHTTPError and a ModelRateLimitError).
_CATEGORIES: tuple[tuple[str, type[ProviderError], bool | None], ...] = (
    ("ModelQuotaExceededError", RateLimitError, False),  # waiting does not refill a quota
    ("ModelRateLimitError", RateLimitError, None),
    ("ModelAuthenticationError", AuthenticationError, None),
    ("ModelContextWindowExceededError", InvalidRequestError, None),
    ("ModelNotFoundError", InvalidRequestError, None),
    ("ModelRequestRejectedError", InvalidRequestError, None),
    ("ModelUnavailableError", ProviderUnavailableError, None),
    ("ModelServerError", ProviderUnavailableError, None),
    ("ModelRequestTimeout", ProviderTimeoutError, None),
    ("ModelConnectionError", ProviderTimeoutError, None),  # ModelTimeoutError included
)


def map_exception(exc: BaseException, exceptions: Any, provider: str) -> ProviderError | None:
    """Our error for one of Pydantic AI's model exceptions, else None.

    Args:
        exc: What the wrapped model's ``request`` or stream raised.
        exceptions: The ``pydantic_ai.exceptions`` module.
        provider: The wrapped model's provider name, for the error.
    """
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    text = f"{provider}: {exc}"
    for name, cls, retryable in _CATEGORIES:
        category = getattr(exceptions, name, None)
        if category is not None and isinstance(exc, category):
            return cls(text, provider=provider, status_code=status, retryable=retryable)
    if isinstance(exc, exceptions.ModelHTTPError):
        return error_for_status(status, text, provider)
    if isinstance(exc, exceptions.ModelAPIError):
        return ProviderError(text, provider=provider)
    content_filter = getattr(exceptions, "ContentFilterError", None)
    if content_filter is not None and isinstance(exc, content_filter):
        return InvalidRequestError(text, provider=provider)  # the same request is refused again
    if isinstance(exc, exceptions.UnexpectedModelBehavior):
        # A malformed or cut-off answer: another attempt may well come out right.
        return ProviderUnavailableError(text, provider=provider)
    if isinstance(exc, exceptions.UserError):
        # The request cannot be formed for this model (a feature it lacks): not retryable.
        return InvalidRequestError(text, provider=provider)
    # An older Pydantic AI lets some SDK or HTTP-client errors through unwrapped.
    if status_of(exc) is not None:
        return error_for_status(status_of(exc), text, provider)
    if is_transport_failure(exc):
        return ProviderTimeoutError(text, provider=provider)
    return None
