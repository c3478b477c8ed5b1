"""Reading the runs dashboard's data from a store: every run's row and the pending approvals.

:func:`read_snapshot` is synchronous and safe to call from a worker thread on a
store that declares the ``multiprocess`` capability (SQLite, PostgreSQL: their
connections are guarded by locks), so a refresh of a store with thousands of runs
does not hold the kernel's event loop. A :class:`Snapshot` holds no approval token:
the dashboard looks the token up again when someone clicks Approve.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...durable.signer import token_issued_at
from ...inspect import _records
from ...messages import ToolApprovalRequest
from ...runtime.records import RuntimeRun
from .dashboard_rows import COLUMNS, Column, PendingApproval, RunRow, run_rows

__all__ = ["ApprovalReader", "Snapshot", "pending_approval", "read_snapshot"]


@dataclass(frozen=True)
class Snapshot:
    """Everything the dashboard shows, read at one time.

    Attributes:
        rows: One row per run, oldest first.
        approvals: The calls waiting for a verdict, the longest-waiting first.
        read_ms: How long the read took.
    """

    rows: list[RunRow]
    approvals: list[PendingApproval]
    read_ms: float


class ApprovalReader:
    """The pending requests of waiting runs, loaded once per change of a run's record.

    A waiting run's checkpoint does not change while it waits, so its requests
    are loaded again only when the runtime's record of the run changed
    (``updated_at``). Thread-safe: one read at a time.
    """

    def __init__(self) -> None:
        self._cache: dict[str, tuple[int, tuple[ToolApprovalRequest, ...]]] = {}
        self._lock = threading.Lock()

    def read(
        self, store: Any, waiting: Sequence[RuntimeRun]
    ) -> list[tuple[RuntimeRun, ToolApprovalRequest]]:
        """Every request of ``waiting`` (runs in ``waiting_approval``) still without a verdict."""
        found: list[tuple[RuntimeRun, ToolApprovalRequest]] = []
        with self._lock:
            for record in waiting:
                cached = self._cache.get(record.run_id)
                if cached is not None and cached[0] == record.updated_at:
                    requests = cached[1]
                else:
                    checkpoint = store.load(record.run_id)
                    requests = checkpoint.pending_approvals if checkpoint is not None else ()
                    self._cache[record.run_id] = (record.updated_at, requests)
                found.extend(
                    (record, request)
                    for request in requests
                    if request.approval_id not in record.verdicts
                )
            still = {r.run_id for r in waiting}
            for run_id in [k for k in self._cache if k not in still]:
                del self._cache[run_id]
        return found


def pending_approval(record: RuntimeRun, request: ToolApprovalRequest) -> PendingApproval:
    """What the view is told of a pending request: everything but its token."""
    agent = " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} ".join(
        (record.agent_id, *request.agent_path)
    )
    return PendingApproval(
        run_id=record.run_id,
        approval_id=request.approval_id,
        tool_name=request.tool_name,
        args=dict(request.input),
        agent=agent,
        requested_at=token_issued_at(request.token) or record.updated_at,
    )


def read_snapshot(
    store: Any,
    approvals: ApprovalReader,
    *,
    columns: Sequence[Column] = COLUMNS,
    now_ms: int | None = None,
) -> Snapshot:
    """Read every run and every pending approval of ``store``.

    Args:
        store: The store (the runtime's).
        approvals: Keeps the requests of waiting runs between reads.
        columns: The columns of the runs table.
        now_ms: The time ages are counted to (now when None).
    """
    started = time.perf_counter()
    full, runtime = _records.run_rows(store)
    rows = run_rows(full, runtime, columns=columns, now_ms=now_ms)
    waiting = [r for r in runtime if r.state == "waiting_approval"]
    found = approvals.read(store, waiting)
    pending = sorted(
        (pending_approval(record, request) for record, request in found),
        key=lambda p: (p.requested_at, p.run_id, p.approval_id),
    )
    elapsed = (time.perf_counter() - started) * 1000
    return Snapshot(rows=rows, approvals=pending, read_ms=elapsed)
