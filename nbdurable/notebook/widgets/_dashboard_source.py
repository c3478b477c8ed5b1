"""Reading the runs dashboard's data from a store: every run's row and the pending approvals.

A :class:`DashboardSource` reads synchronously, so the dashboard can call it from a
worker thread: a refresh of a store with thousands of runs then does not hold the
kernel's event loop. On a SQLite file it reads through a connection of its own, so
the runtime's writes (on the loop) never wait for the lock of the dashboard's read;
PostgreSQL stores hand out pooled connections. A :class:`Snapshot` holds no
approval token: the dashboard looks the token up again when someone clicks Approve.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..._errors import RunNotFoundError
from ...durable._signer import token_issued_at
from ...durable.store import MULTIPROCESS, HistoryStore, supports
from ...inspect import _records
from ...inspect._approvals import approval_rows
from ...messages import ToolApprovalRequest
from ...runs import RuntimeRun
from ...stores.sqlite import SqliteSessionStore
from ._dashboard_rows import COLUMNS, Column, PendingApproval, RowCache, RunRow, run_rows

__all__ = ["DashboardSource", "Snapshot", "pending_approval"]

ANGLE = " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "


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


def pending_approval(record: RuntimeRun, request: ToolApprovalRequest) -> PendingApproval:
    """What the view is told of a pending request: everything but its token."""
    return PendingApproval(
        run_id=record.run_id,
        approval_id=request.approval_id,
        tool_name=request.tool_name,
        args=dict(request.input),
        agent=ANGLE.join((record.agent_id, *request.agent_path)),
        requested_at=token_issued_at(request.token) or record.updated_at,
        allow_edit=request.allow_edit,
        parameters=request.parameters,
    )


def _inbox(source: Any, record: RuntimeRun) -> tuple[PendingApproval, ...]:
    """The run's requests waiting for a verdict: the rows of ``nbdurable.inspect.approvals``."""
    try:
        rows = approval_rows(
            source, run_id=record.run_id, status=("pending", "expired"), max_age_ms=None
        )
    except RunNotFoundError:  # deleted since the records were read
        return ()
    editable = _editable(source, record.run_id) if rows else {}
    return tuple(
        PendingApproval(
            run_id=record.run_id,
            approval_id=row["approval_id"],
            tool_name=row["tool"],
            args=row["arguments"],
            agent=ANGLE.join((record.agent_id, *row["agent_path"])),
            requested_at=(
                record.updated_at if row["requested_at"] is None else row["requested_at"]
            ),
            allow_edit=row["approval_id"] in editable,
            parameters=editable.get(row["approval_id"]),
        )
        for row in rows
    )


def _editable(source: Any, run_id: str) -> dict[str, dict[str, Any] | None]:
    """The run's waiting requests whose tool allows editing: approval id -> its JSON schema."""
    try:
        infos = source.history(run_id)
    except RunNotFoundError:
        return {}
    latest = infos[-1].pending_approvals if infos else ()
    return {r.approval_id: r.parameters for r in latest if r.allow_edit}


_pauses = 0
_pause_lock = threading.Lock()
_was_enabled = False


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Hold off the cyclic garbage collector while a read allocates its thousands of rows.

    A read of a large store allocates enough objects to set off a full
    collection, which stops every thread (the kernel's event loop too) for
    about 100 ms at 5,000 runs; paused, the loop waits ~10 ms at most (see
    ``benchmarks/dashboard_bench.py``). Collection resumes when the last
    concurrent read ends, as it was before the first began.
    """
    global _pauses, _was_enabled
    with _pause_lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


class DashboardSource:
    """Reads a store for the dashboard, keeping what did not change between reads.

    A run's row is built again only when its row or its runtime record changed;
    a waiting run's checkpoint (its pending requests) is loaded again only when
    its record changed. One read at a time (thread-safe).

    Args:
        store: The store (the runtime's).
        columns: The columns of the runs table.
    """

    def __init__(self, store: HistoryStore, columns: Sequence[Column] = COLUMNS) -> None:
        self.store = store
        self.columns = tuple(columns)
        self._reader: Any = None
        self._rows: RowCache = {}
        self._approvals: dict[str, tuple[int, tuple[PendingApproval, ...]]] = {}
        self._lock = threading.Lock()
        self._closing = False
        self._closed = False

    @property
    def threaded(self) -> bool:
        """Whether reads may run in a worker thread (the store guards its connections)."""
        return supports(self.store, MULTIPROCESS)

    def _source(self) -> Any:
        store = self.store
        if isinstance(store, SqliteSessionStore) and store.path != ":memory:":
            if self._reader is None:  # WAL: a reader of its own never waits for a writer
                self._reader = SqliteSessionStore(store.path)
            return self._reader
        return store

    def read(self, now_ms: int | None = None) -> Snapshot:
        """Every run and every pending approval, now."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the dashboard's store reader is closed")
            try:
                with _collector_paused():
                    return self._read(now_ms)
            finally:
                if self._closing:
                    self._close_reader()

    def _read(self, now_ms: int | None) -> Snapshot:
        started = time.perf_counter()
        source = self._source()
        full, runtime = _records.run_rows(source)
        rows = run_rows(full, runtime, columns=self.columns, now_ms=now_ms, cache=self._rows)
        waiting = [r for r in runtime if r.state == "waiting_approval"]
        pending = sorted(
            self._pending(source, waiting),
            key=lambda p: (p.requested_at, p.run_id, p.approval_id),
        )
        elapsed = (time.perf_counter() - started) * 1000
        return Snapshot(rows=rows, approvals=pending, read_ms=elapsed)

    def _pending(self, source: Any, waiting: Sequence[RuntimeRun]) -> list[PendingApproval]:
        found: list[PendingApproval] = []
        for record in waiting:
            cached = self._approvals.get(record.run_id)
            if cached is not None and cached[0] == record.updated_at:
                approvals = cached[1]
            else:  # a waiting run's checkpoints do not change while its record does not
                approvals = _inbox(source, record)
                self._approvals[record.run_id] = (record.updated_at, approvals)
            answered = record.verdicts.keys() | record.decided.keys()
            found.extend(a for a in approvals if a.approval_id not in answered)
        still = {r.run_id for r in waiting}
        for run_id in [k for k in self._approvals if k not in still]:
            del self._approvals[run_id]
        return found

    def close(self) -> None:
        """Close the connection of its own, now or, during a read, when the read ends."""
        self._closing = True
        if self._lock.acquire(blocking=False):
            try:
                self._close_reader()
            finally:
                self._lock.release()

    def _close_reader(self) -> None:
        self._closed = True
        if self._reader is not None:
            self._reader.close()
            self._reader = None
