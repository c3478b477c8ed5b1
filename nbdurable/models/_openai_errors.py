"""The ``openai`` SDK's exceptions as our typed :class:`ProviderError` kinds."""

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

__all__ = ["PROVIDER", "map_error"]

PROVIDER = "openai"

_INVALID = {400, 404, 413, 422}
_AUTH = {401, 403}
_UNAVAILABLE = {409, 500, 502, 503, 504, 529}


def map_error(exc: Exception, model_id: str) -> ProviderError | None:
    """Our error for an SDK exception, or None when ``exc`` is not the SDK's.

    Timeouts and connection failures become :class:`ProviderTimeoutError`;
    HTTP errors are sorted by status (and by the error body's type or code:
    ``overloaded``, ``insufficient_quota``); an error event in the middle of a
    stream, which has no status, by its type or code alone.
    """
    import openai

    if not isinstance(exc, openai.OpenAIError):
        return None
    text = f"{getattr(exc, 'message', None) or exc} (model {model_id!r})"
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError included
        return ProviderTimeoutError(text, provider=PROVIDER)
    status: int | None = getattr(exc, "status_code", None)
    kind = _kind(exc)
    overloaded = "overloaded" in kind or "overloaded" in text.lower()
    if status == 429 or (status is None and "rate_limit" in kind):
        # An exhausted quota is a 429 too, and waiting does not refill it.
        retry = False if "insufficient_quota" in kind else None
        return RateLimitError(text, provider=PROVIDER, status_code=status, retryable=retry)
    if status in _AUTH or (status is None and ("auth" in kind or "permission" in kind)):
        return AuthenticationError(text, provider=PROVIDER, status_code=status)
    if overloaded or status in _UNAVAILABLE or (status is not None and status >= 500):
        return ProviderUnavailableError(text, provider=PROVIDER, status_code=status)
    if status == 408:
        return ProviderTimeoutError(text, provider=PROVIDER, status_code=status)
    if status in _INVALID or (status is not None and 400 <= status < 500):
        return InvalidRequestError(text, provider=PROVIDER, status_code=status)
    if "invalid_request" in kind:
        return InvalidRequestError(text, provider=PROVIDER)
    if status is None:  # an error event mid-stream: the server failed the response
        return ProviderUnavailableError(text, provider=PROVIDER)
    return ProviderError(text, provider=PROVIDER, status_code=status)


def _kind(exc: Any) -> str:
    """The error body's ``type`` and ``code``, lower-cased (empty when absent)."""
    parts = [getattr(exc, "type", None), getattr(exc, "code", None)]
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        parts += [body.get("type"), body.get("code")]
    return " ".join(str(p).lower() for p in parts if p)
