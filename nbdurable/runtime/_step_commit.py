"""A run owner's writes riding one commit: fewer transactions per runtime step.

A runtime step counts its model call, journals the model's response, resets its
model attempts, logs the model's events and the step's tool calls, counts each
tool call and writes its intent, records each tool's result, and saves its
checkpoint. On a store with :class:`~nbdurable.durable.store.RunStore.rt_commit`
these share three transactions on a steady step:

1. before the model call: its count (``operations``, ``model_attempts``: a
   crash uses the attempt up), with the previous step's completed intents;
2. before the tools: the journal entry, the attempt reset, the events so far
   (the calls included) and the first call's count and ``started`` intent, so
   the response is durable before anything acts on it, and the call before it
   starts (a later call of a batch writes its own, with whatever waits);
3. after the tools: the checkpoint with its events (the session store's own
   write).

A tool's ``completed`` intent waits for the next commit (:meth:`StepRiders.complete`):
the checkpoint holds the result already, and a crash between the tool's end
and the checkpoint leaves the call ``started``, exactly as a crash during the
tool, so its recovery policy decides (``safe`` runs it again, ``manual`` asks a
human). An owner that drains writes the result at once (the next owner reuses
it), and a leg's end writes whatever still waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..durable._checkpoint import AgentCheckpoint
from ..durable._offload import NowaitDelegate
from ..durable._transient import StoreRetry
from ..durable.store import RunStore
from ..events._model import Event, NewEvent
from ..runs import RunPatch, RuntimeRun, ToolIntent
from ._log_in_front import EventLogInFront

__all__ = ["StepRiders"]

_Staged = tuple[RunPatch, ToolIntent]


class StepRiders(NowaitDelegate, EventLogInFront):
    """A run owner's pending writes, and the event store that takes them along.

    Stands where the leg's event writer expects its store: ``append_events``
    writes the pending journal entry and record changes in the events'
    transaction, ``save_with_events`` writes them just before the checkpoint.
    Everything else is the store's (:class:`~._log_in_front.EventLogInFront`).

    Args:
        store: The runtime's store (events, run records and ``rt_commit``).
        committer: The same store, as its ``rt_commit`` capability.
        run_id: The run owned.
        fence: The owner's fencing token (every write is fenced).
        settled: Called with the record a write returned (the owner's copy, the mirror).
        retry: The runtime's store retry, for writes made outside the event writer.
        recorded: Called with the call ids of the completed intents a commit wrote.
    """

    # Each makes one store call, or a commit and then one call: run again after
    # the commit went through, it finds nothing pending and makes the call alone.
    nowait_methods = frozenset(
        {"commit", "commit_retried", "flush", "append_events", "save_with_events"}
    )

    def __init__(
        self,
        store: Any,
        committer: RunStore,
        run_id: str,
        fence: int,
        settled: Callable[[RuntimeRun], None],
        retry: StoreRetry | None = None,
        *,
        recorded: Callable[[Sequence[str]], None] | None = None,
    ) -> None:
        self.inner = store
        self.recorded = recorded
        self.committer = committer
        self.run_id = run_id
        self.fence = fence
        self.settled = settled
        self.retry = retry
        self._lock = threading.Lock()
        self._journal: tuple[int, str] | None = None
        self._changes = RunPatch()
        self._staged: _Staged | None = None
        self._completed: dict[str, ToolIntent] = {}

    def nowait_store(self) -> object:
        """The store the writes go to."""
        return self.inner

    @property
    def pending(self) -> bool:
        """Writes wait that must be durable before the step goes on (journal, counts, a start)."""
        with self._lock:
            return self._urgent()

    @property
    def waiting(self) -> bool:
        """Anything waits, completed intents included."""
        with self._lock:
            return self._urgent() or bool(self._completed)

    def _urgent(self) -> bool:
        return self._journal is not None or bool(self._changes) or self._staged is not None

    def complete(self, intent: ToolIntent) -> None:
        """Hold a ``completed`` intent for whichever commit comes next."""
        with self._lock:
            self._completed[intent.tool_call_id] = intent

    def journal(self, step_index: int, response: str, changes: RunPatch) -> None:
        """Hold a step's model response and record changes for the next commit."""
        with self._lock:
            self._journal = (step_index, response)
            self._changes |= changes

    def stage(self, changes: RunPatch, intent: ToolIntent) -> None:
        """Hold a tool call's count and its ``started`` intent for the next commit."""
        with self._lock:
            self._staged = (changes, intent)

    def unstage(self) -> None:
        """Drop a staged call no write took along (its leg ended before it started)."""
        with self._lock:
            self._staged = None

    def _take(
        self,
    ) -> tuple[tuple[int, str] | None, RunPatch, _Staged | None, list[ToolIntent]]:
        with self._lock:
            return self._journal, self._changes, self._staged, [*self._completed.values()]

    def _done(
        self,
        journal: tuple[int, str] | None,
        changes: RunPatch,
        staged: _Staged | None,
        completed: list[ToolIntent],
    ) -> None:
        # Only what was written is cleared: a hold made meanwhile waits for the next one.
        with self._lock:
            if self._journal == journal:
                self._journal = None
            self._changes = self._changes.without(changes)
            if self._staged is staged:
                self._staged = None
            for intent in completed:
                if self._completed.get(intent.tool_call_id) is intent:
                    del self._completed[intent.tool_call_id]

    def commit(
        self,
        events: Sequence[NewEvent] = (),
        *,
        changes: RunPatch | None = None,
        intents: Sequence[ToolIntent] = (),
    ) -> Sequence[Event]:
        """One fenced transaction: what waits, plus ``events``, ``changes`` and ``intents``.

        Safe to send again after a connection-level failure (upserts and
        absolute values), like the separate writes it replaces.
        """
        journal, waiting, staged, completed = self._take()
        merged = waiting
        if staged:
            merged |= staged[0]
        if changes:
            merged |= changes
        added, record = self.committer.rt_commit(
            self.run_id,
            fence=self.fence,
            events=events,
            journal=journal,
            changes=merged or None,
            intents=[*completed, *([staged[1]] if staged else ()), *intents],
        )
        self._done(journal, waiting, staged, completed)
        if completed and self.recorded is not None:
            self.recorded([intent.tool_call_id for intent in completed])
        if record is not None:
            self.settled(record)
        return added

    def commit_retried(
        self, *, changes: RunPatch | None = None, intents: Sequence[ToolIntent] = ()
    ) -> None:
        """:meth:`commit` through the runtime's store retry (a write outside the event writer)."""
        if self.retry is None:
            self.commit(changes=changes, intents=intents)
        else:
            self.retry.call("record a tool call", self.commit, changes=changes, intents=intents)

    def flush(self) -> None:
        """Write whatever waits (a leg's end), through the store retry."""
        if self.waiting:
            self.commit_retried()

    # -- the event writer's store ------------------------------------------------------

    def append_events(
        self, run_id: str, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> Sequence[Event]:
        """Append events; the writes that wait ride their transaction."""
        if run_id != self.run_id or fence != self.fence or not self.waiting:
            return self.inner.append_events(run_id, events, fence=fence)  # type: ignore[no-any-return]
        return self.commit(events)

    def save_with_events(
        self, checkpoint: AgentCheckpoint, events: Sequence[NewEvent], **options: Any
    ) -> Sequence[Event]:
        """Save a checkpoint with its events, the pending writes committed first.

        Completed intents alone do not make a commit of their own: they ride a later one.
        """
        if self.pending and checkpoint.run_id == self.run_id:
            self.commit()
        return self.inner.save_with_events(checkpoint, events, **options)  # type: ignore[no-any-return]
