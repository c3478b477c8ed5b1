"""The events a run-state change writes: ``run_state``, then the terminal event."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from .._errors import FencedOutError
from ..durable._offload import NowaitDelegate
from ..events._model import RUN_ERROR, RUN_FINISHED, RUN_STATE, NewEvent
from ..runs import GRAPH_SETTLED_STATES, RunPatch, RuntimeRun
from ._run import RunFailedError

if TYPE_CHECKING:
    from ._seam import RunRecords

__all__ = [
    "RecentIds",
    "StateEventWrites",
    "StateWriteProgress",
    "claim_event",
    "settled_nodes",
    "state_events",
    "terminal_event",
    "unclaimed_event",
]


@dataclass
class StateWriteProgress:
    """What a state change (``set_state``) has written so far, for a try that runs it again.

    A change run on the event loop's thread stops where a store call would
    wait, and runs again from the start on a store thread (see
    :func:`~nbdurable.durable._offload.run_without_waiting`); what its first try
    committed is not written twice: its events, the record, a promoted run's event.
    """

    evented: bool = False
    """The change's events are appended."""
    record: RuntimeRun | None = None
    """The record as the change stored it."""
    announced: set[str] = field(default_factory=set)
    """Runs made claimable whose state event is written."""


def state_events(
    record: RuntimeRun, now: int, finish: dict[str, Any] | None = None
) -> list[NewEvent]:
    """The ``run_state`` event of the record's state, and its terminal event when final.

    Both go in one append, so the terminal event is the last one a final run writes.
    """
    payload: dict[str, Any] = {
        "state": record.state,
        "reason": record.reason,
        "next_attempt_at": record.next_attempt_at,
    }
    if record.retried:
        payload["retried"] = True
    events = [NewEvent(type=RUN_STATE, created_at=now, payload=payload)]
    if record.finished:
        events.append(terminal_event(record, now, finish))
    return events


def settled_nodes(nodes: list[RuntimeRun], finished: RuntimeRun) -> list[RuntimeRun]:
    """The graph nodes the store settled when ``finished`` finished (they need events).

    ``nodes`` is the graph in topological order, as the store lists it. A node
    claimed since (``running`` already, possibly in the same millisecond) is left
    to its claimer, which writes the ``pending`` it skipped (:func:`claim_event`). A node
    is attributed by ``settled_by``, which the settling write stamps: two
    dependencies finishing in the same millisecond cannot both claim it. Records
    settled without it (a store that settles its own way) fall back to the time.
    """
    downstream = {finished.run_id}
    for node in nodes:  # dependents come after their dependencies
        if downstream.intersection(node.depends_on):
            downstream.add(node.run_id)
    return [
        node
        for node in nodes
        if node.run_id != finished.run_id
        and node.run_id in downstream
        and node.state in GRAPH_SETTLED_STATES
        and node.updated_at == finished.updated_at
        and node.settled_by in (None, finished.run_id)
    ]


def terminal_event(record: RuntimeRun, now: int, finish: dict[str, Any] | None = None) -> NewEvent:
    """The terminal event of a finished run (``run_finished`` or ``run_error``).

    ``run_finished`` for a completed run (the completing leg's finish payload,
    when there was a leg); ``run_error`` for a failed or cancelled one, with the
    error :meth:`Run.result` raises. Both carry ``state``; ``run_error`` also
    ``reason`` and the run's last ``error``.
    """
    if record.state == "completed":
        return NewEvent(
            type=RUN_FINISHED, created_at=now, payload={**(finish or {}), "state": "completed"}
        )
    failure = RunFailedError(record)
    return NewEvent(
        type=RUN_ERROR,
        created_at=now,
        payload={
            "error_type": type(failure).__name__,
            "message": str(failure),
            "state": record.state,
            "reason": record.reason,
            "error": record.error,
        },
    )


def unclaimed_event(runtime: RunRecords, record: RuntimeRun) -> bool:
    """The state event of a run made claimable (submitted, promoted, settled, decided).

    Not written once the run is claimed since (the append is fenced by the
    record's fence as read): its claim writes the missing ``pending`` itself
    (:func:`claim_event`), so the log never shows ``running`` before ``pending``.
    Returns whether it was written.
    """
    try:
        return runtime.state_event(record, fence=record.fence)
    except FencedOutError:
        return False


def claim_event(runtime: RunRecords, record: RuntimeRun) -> None:
    """The state event of a run its owner just claimed.

    A run's first claim (any claim of a graph node, which a retry can put back to
    ``queued``) may overtake the ``pending`` event of the process that submitted
    it or promoted it from ``queued`` (that append is fenced and now refused, or
    left to the claim): the claim then writes ``pending`` first.
    """
    # A graph node run again (retried back to ``queued``) can be promoted and
    # claimed in one millisecond too: the finisher then leaves its pending here.
    # A run resumed by a verdict too: the decider writes its pending after the
    # verdict's record, and a runtime woken by that record may claim first. A run is
    # never claimed out of queued, needs_attention or waiting_approval, so a log that
    # still ends in one of them (a paused node the settle made pending) lacks its pending.
    may_lack_pending = record.graph_id is not None or bool(record.verdicts)
    if record.fence == 1 and not may_lack_pending:
        # A run submitted here, its pending written before this claim, need not be read.
        may_lack_pending = record.run_id not in runtime.pending_written
    last = _last_state(runtime, record.run_id) if may_lack_pending else "pending"
    if last is None and record.depends_on and record.fence == 1:
        # A node's dependencies ended and it was claimed before its submitter wrote
        # its queued (a loaded submitter, a fast cluster): its log starts there.
        unclaimed_event(runtime, RunPatch(state="queued", reason=None).apply(record))
    if last in (None, "queued", "needs_attention", "waiting_approval"):
        unclaimed_event(runtime, RunPatch(state="pending", reason=None).apply(record))
    runtime.state_event(record)
    runtime.pending_written.discard(record.run_id)


def _last_state(runtime: RunRecords, run_id: str) -> str | None:
    """The state of the run's last ``run_state`` event (None without one)."""
    log = runtime.event_store
    events = runtime.store_retry.call("read events", log.read_events, run_id)
    for event in reversed(events):
        if event.type == RUN_STATE:
            return cast(str | None, event.payload.get("state"))
    return None


class StateEventWrites(NowaitDelegate):
    """:func:`claim_event` and :func:`unclaimed_event`, offered to the event loop's thread.

    Each is a short read and an append or two on the runtime's store: on a
    store that runs calls without waiting (SQLite), :func:`~nbdurable.durable._offload.offload`
    runs them on the loop, a trip to a store thread only when one would wait
    (issue 42: two trips a run, and the loop's writes meanwhile yielding to them).
    Both may run again from the start: a claim's ``pending`` written once is
    found by the second read, a fenced append that would wait rolls back.

    Args:
        runtime: The runtime whose store the events go to.
    """

    nowait_methods = frozenset({"claimed", "unclaimed"})

    def __init__(self, runtime: RunRecords) -> None:
        self.runtime = runtime

    def nowait_store(self) -> object:
        """The runtime's store (its event log and run records)."""
        return self.runtime.store

    def claimed(self, record: RuntimeRun) -> None:
        """:func:`claim_event`."""
        claim_event(self.runtime, record)

    def unclaimed(self, record: RuntimeRun) -> bool:
        """:func:`unclaimed_event`."""
        return unclaimed_event(self.runtime, record)


class RecentIds:
    """Ids this runtime knows something of, the latest :attr:`KEEP` of them (a bounded set).

    What a run's start would otherwise read from the store (issue 42): the runs
    it submitted whose ``pending`` event it wrote before any claim (a first
    claim then need not read the run's log, :func:`claim_event`), and the
    sessions it made for a submission (``session-<new run id>``: no run before
    it, so a first leg need not read the session's history). An id forgotten,
    or never known here (another process's), is read as before.
    """

    KEEP = 4096

    def __init__(self) -> None:
        self._runs: dict[str, None] = {}
        self._lock = threading.Lock()  # a claim's event may be written on a store thread

    def add(self, run_id: str) -> None:
        """Remember ``run_id``."""
        with self._lock:
            self._runs[run_id] = None
            if len(self._runs) > self.KEEP:
                del self._runs[next(iter(self._runs))]

    def discard(self, run_id: str) -> None:
        """Forget ``run_id``."""
        with self._lock:
            self._runs.pop(run_id, None)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs
