"""The bridge's errors (typed, under NbdurableError) and the HTTP status of each.

Every 4xx/5xx answer has the body ``{"error": {"type": ..., "message": ...}}``
(plus ``details`` for a request that does not validate). Runtime errors map to
statuses by their type: ``ConfigurationError`` 422, ``RunNotFoundError`` and
``CheckpointNotFoundError`` 404, ``DurableConflictError`` 409 (among them
``ApprovalNotPendingError``: another verdict won, named in ``verdict``),
``ApprovalExpiredError`` 410 (a genuine approval token past the maximum age: ask
for a new link), ``ApproverNotAllowedError`` 403 (the agent does not allow this
principal to decide the call), ``LimitExceededError`` 413 (a payload too large) or 429 (too
many runs).
"""

from __future__ import annotations

from .._errors import (
    ApprovalExpiredError,
    ApprovalNotPendingError,
    ApproverNotAllowedError,
    CheckpointNotFoundError,
    ConfigurationError,
    DurableConflictError,
    LimitExceededError,
    NbdurableError,
    RunNotFoundError,
)

__all__ = [
    "ApprovalExpiredError",
    "ApprovalNotPendingError",
    "ApprovalTokenError",
    "NotAuthenticatedError",
    "RequestTimeoutError",
    "RunStateError",
    "ServerError",
    "status_of",
]


class ServerError(NbdurableError):
    """An error of the HTTP bridge itself (not of the runtime)."""

    status_code = 400


class NotAuthenticatedError(ServerError):
    """The request carries no bearer token, or a wrong one."""

    status_code = 401


class RequestTimeoutError(ServerError):
    """A client sent a request's headers or body too slowly (the bridge's read deadlines)."""

    status_code = 408


class ApprovalTokenError(ServerError):
    """An approval token that is forged, altered, expired or bound to another run or call."""

    status_code = 403


class RunStateError(DurableConflictError):
    """The run is not in a state that allows the operation (e.g. a retry of a running run)."""


def status_of(error: BaseException) -> int:
    """The HTTP status for an error of ours."""
    if isinstance(error, ServerError):
        return error.status_code
    if isinstance(error, (RunNotFoundError, CheckpointNotFoundError)):
        return 404
    if isinstance(error, ApprovalExpiredError):
        return 410
    if isinstance(error, ApproverNotAllowedError):
        return 403
    if isinstance(error, DurableConflictError):
        return 409
    if isinstance(error, LimitExceededError):
        too_large = getattr(error, "limit", "") in ("max_payload_bytes", "max_body_bytes")
        return 413 if too_large else 429
    if isinstance(error, ConfigurationError):
        return 422
    return 400
