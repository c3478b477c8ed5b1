"""Recording an approval verdict on a run record: one verdict per approval, from any process."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from .._errors import ApprovalNotPendingError
from .runtime_run import RuntimeRun

__all__ = ["decide", "verdict_entry"]


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
