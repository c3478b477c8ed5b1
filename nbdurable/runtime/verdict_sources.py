"""Where a verdict comes from, and the error for a verdict whose token is too old."""

from __future__ import annotations

from .._errors import ApprovalExpiredError, ConfigurationError
from ..durable.deciders import claimed_user, valid_name
from ..messages import VerdictSource

__all__ = ["VIAS", "approval_expired", "claimed_source"]

VIAS = frozenset({"widget", "magic", "cli", "http", "link", "api", "grant"})
"""How a verdict may be given (``VerdictSource.via``)."""


def claimed_source(by: str | None, via: str) -> VerdictSource:
    """The source of a verdict from an unauthenticated path: ``by`` or the claimed user.

    Raises:
        ConfigurationError: A blank ``by``, or ``via`` not one of :data:`VIAS`.
    """
    if via not in VIAS:
        raise ConfigurationError(f"via must be one of {', '.join(sorted(VIAS))}, not {via!r}")
    name = claimed_user() if by is None else valid_name(by, "by")
    return VerdictSource(by=name, authenticated=False, via=via)


def _duration(ms: int) -> str:
    seconds = max(0, ms // 1000)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def approval_expired(
    run_id: str, approval_id: str, age_ms: int, max_age_ms: int, advice: str
) -> ApprovalExpiredError:
    """The error for a verdict whose token is too old (nothing was recorded)."""
    return ApprovalExpiredError(
        approval_id,
        age_ms=age_ms,
        max_age_ms=max_age_ms,
        message=(
            f"the token of approval {approval_id!r} of run {run_id!r} expired "
            f"({_duration(age_ms)} old, the maximum is {_duration(max_age_ms)}): nothing was "
            f"recorded and the request still waits; {advice}"
        ),
    )
