"""Recording an approval verdict on a run record: one verdict per approval, from any process."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from .._errors import ApprovalExpiredError, ApprovalNotPendingError, ConfigurationError
from ..messages import VerdictSource
from ._deciders import claimed_user, valid_name
from ._record import RuntimeRun

__all__ = ["VIAS", "approval_expired", "claimed_source", "decide", "verdict_entry"]

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


def verdict_entry(response: dict[str, Any], now: int) -> dict[str, Any]:
    """What :attr:`RuntimeRun.decided` keeps of a verdict (the token only as a digest)."""
    token = response.get("token")
    entry = {
        "approved": bool(response.get("approved")),
        "reason": response.get("reason"),
        "token_sha256": hashlib.sha256(token.encode()).hexdigest() if token else None,
        "at": now,
    }
    if response.get("source"):
        entry["source"] = response["source"]
    return entry


def decide(
    run: RuntimeRun,
    approval_id: str,
    response: dict[str, Any],
    pending_ids: Sequence[str],
    now: int,
) -> RuntimeRun | None:
    """``run`` with one more verdict, or None when that same verdict is recorded already.

    A pure function; stores call it inside the transaction that writes its
    result, so of two verdicts on one approval, from any processes, exactly one
    is recorded. It applies only while the run is ``waiting_approval`` on
    ``approval_id`` and no verdict on it was recorded. The same verdict again
    (approved both times with the same token, or denied both times) is a
    repeat, not a conflict: the caller reports the original success. The run
    becomes ``pending`` once every approval in ``pending_ids`` has a verdict.

    Raises:
        ApprovalNotPendingError: Another verdict was recorded (``verdict`` names
            it), or the run does not wait for the approval (``state``).
    """
    entry = verdict_entry(response, now)
    earlier = run.decided.get(approval_id)
    if earlier is None and approval_id in run.verdicts:  # recorded before ``decided`` existed
        earlier = verdict_entry(run.verdicts[approval_id], run.updated_at)
    if earlier is not None:
        same = earlier.get("approved") == entry["approved"] and (
            not entry["approved"] or earlier.get("token_sha256") == entry["token_sha256"]
        )
        if same:
            return None
        winner = "approved" if earlier.get("approved") else "denied"
        raise ApprovalNotPendingError(run.run_id, approval_id, verdict=winner, state=run.state)
    if run.state != "waiting_approval" or approval_id not in pending_ids:
        raise ApprovalNotPendingError(run.run_id, approval_id, state=run.state)
    verdicts = {**run.verdicts, approval_id: response}
    answered = all(pending in verdicts for pending in pending_ids)
    return run.model_copy(
        update={
            "state": "pending" if answered else "waiting_approval",
            "verdicts": verdicts,
            "decided": {**run.decided, approval_id: entry},
            "updated_at": now,
        }
    )
