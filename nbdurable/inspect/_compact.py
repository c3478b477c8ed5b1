"""The compact runs view: the few columns a person reads first, formatted for reading.

Computed from the full rows of :func:`nbdurable.inspect.runs` and the runtime's
records, without pandas: the notebook's frame, the dashboard and the terminal
can all show the same words.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ..runs import REASON_STATES, RuntimeRun, stalled

__all__ = ["COMPACT_COLUMNS", "age", "compact_rows", "cost_text", "why"]

COMPACT_COLUMNS = ("run_id", "status", "agent", "steps", "tokens", "cost", "age", "reason")
"""The compact view's columns (``run_id`` is the index of the DataFrame)."""


def cost_text(cost: float | None) -> str:
    """A cost in US dollars as people write it (``$0.0123``); blank when unknown."""
    if cost is None or cost != cost:  # None or NaN
        return ""
    if cost == 0:
        return "$0"
    if cost < 0.0001:
        return "<$0.0001"
    if cost >= 100:
        return f"${cost:,.0f}"
    if cost >= 1:
        return f"${cost:.2f}"
    return f"${cost:.4f}"


def age(created_ms: int | None, now_ms: int | None = None) -> str:
    """How long ago ``created_ms`` was, in one or two units: ``45s``, ``3m``, ``2h 05m``, ``4d``."""
    if not created_ms:
        return ""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    seconds = max(0, (now - created_ms) // 1000)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m" if minutes >= 10 else f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if days < 10 else f"{days}d"


def why(row: dict[str, Any], run: RuntimeRun | None) -> str:
    """In a few words: what a waiting run waits for, or why a run ended as it did.

    Blank for a run that is moving (pending, running) or completed. A running
    run whose owner stopped (:func:`~nbdurable.runs.stalled`) says so; otherwise
    the runtime's own ``waiting_reason`` wins when it has one.
    """
    stopped = stalled(run) if run is not None else None
    if stopped is not None:
        return stopped.text()
    if run is not None and run.waiting_reason:
        return run.waiting_reason
    status = row.get("status")
    pending = row.get("pending_approvals") or 0
    if status in ("waiting_approval", "suspended") and pending:
        return f"{pending} approval{'s' if pending != 1 else ''}"
    if run is None:
        return ""
    if status == "queued":
        if run.depends_on:
            return f"after {row.get('depends_on')}"
        return f"behind session {run.session_id}"
    if status == "retry_wait" and run.next_attempt_at:
        return f"model retry in {_until(run.next_attempt_at)}"
    if status in REASON_STATES and run.reason:
        return run.reason
    return ""


def _until(when_ms: int) -> str:
    seconds = max(0, (when_ms - int(time.time() * 1000)) // 1000)
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


def compact_rows(
    rows: Iterable[dict[str, Any]], runtime: Iterable[RuntimeRun], now_ms: int | None = None
) -> list[dict[str, Any]]:
    """The compact columns of each full row, in the same order."""
    by_id = {r.run_id: r for r in runtime}
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return [
        {
            "run_id": row["run_id"],
            "status": row["status"],
            "agent": row["agent"],
            "steps": row["steps"],
            "tokens": row["total_tokens"],
            "cost": cost_text(row["cost"]),
            "age": age(row["created_at"], now),
            "reason": why(row, by_id.get(row["run_id"])),
        }
        for row in rows
    ]
