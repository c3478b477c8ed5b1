"""Exceptions raised through a LangChain chat model as nbdurable's typed provider errors.

A LangChain integration raises its provider SDK's exceptions (``openai.RateLimitError``,
``anthropic.APIStatusError``, ``httpx`` errors, ...), in langchain-core 1.x also
classified under ``langchain_core.exceptions.ModelError``. Both are read here
without importing any provider SDK: the LangChain classification first, then an
HTTP status on the exception or its ``response``, then timeouts and broken
connections by type.
"""

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
from ._status import error_for_status, is_transport_failure, quota_exhausted, status_of

__all__ = ["map_exception"]

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
            retryable = False if cls is RateLimitError and quota_exhausted(exc) else None
            return cls(text, provider=provider, status_code=status, retryable=retryable)
    if status is not None:
        error = error_for_status(status, text, provider)
        if isinstance(error, RateLimitError) and quota_exhausted(exc):
            error.retryable = False
        return error
    if is_transport_failure(exc):
        return ProviderTimeoutError(text, provider=provider)
    return None
