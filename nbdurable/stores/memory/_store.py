"""The in-memory reference store: latest save wins for ``load``, every snapshot kept."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Sequence
from typing import ClassVar

from ..._errors import RunNotFoundError
from ...durable._checkpoint import AgentCheckpoint, CheckpointInfo
from ...durable._records import RunRecord
from ...durable.store import (
    Capability,
    DelegatingRunStore,
    EventLog,
    HistoryStore,
    check_commit,
)
from ...events._model import Event, NewEvent, numbered
from ...runs import RunPatch, RuntimeRun, ToolIntent
from ._runs import MemoryRunRecords

__all__ = ["InMemorySessionStore"]


class InMemorySessionStore(HistoryStore, DelegatingRunStore, EventLog):
    """Keeps every checkpoint of every run in process memory.

    ``load(run_id)`` returns the latest save (the reference semantics);
    ``load(run_id, step_index=n)`` and ``history(run_id)`` give the older
    snapshots, so history works in tests and demos without a file.
    Thread-safe; nothing survives the process.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.HISTORY, Capability.EVENTS, Capability.RUNTIME, Capability.COMMIT}
    )

    def __init__(self) -> None:
        self.run_records: MemoryRunRecords = MemoryRunRecords()
        self._runs: dict[str, list[AgentCheckpoint]] = {}
        self._events: dict[str, list[Event]] = {}
        self._lock = threading.Lock()

    def save(self, checkpoint: AgentCheckpoint) -> None:
        """Append a snapshot; it becomes what ``load`` returns."""
        with self._lock:
            self._runs.setdefault(checkpoint.run_id, []).append(checkpoint)

    # -- event log ---------------------------------------------------------------------

    def save_with_events(
        self, checkpoint: AgentCheckpoint, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> builtins.list[Event]:
        """Save a checkpoint and append events at once (fenced when ``fence`` is given)."""
        with self.run_records.lock, self._lock:
            if fence is not None:
                self.run_records.rt_check_fence(checkpoint.run_id, fence)
            self._runs.setdefault(checkpoint.run_id, []).append(checkpoint)
            return self._append(checkpoint.run_id, events)

    def append_events(
        self, run_id: str, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> builtins.list[Event]:
        """Append events to a run's log; offsets continue from the last one."""
        with self.run_records.lock, self._lock:
            if fence is not None:
                self.run_records.rt_check_fence(run_id, fence)
            return self._append(run_id, events)

    def rt_commit(
        self,
        run_id: str,
        *,
        fence: int,
        events: Sequence[NewEvent] = (),
        journal: tuple[int, str] | None = None,
        changes: RunPatch | None = None,
        intents: Sequence[ToolIntent] = (),
    ) -> tuple[builtins.list[Event], RuntimeRun | None]:
        """Several writes of a run's owner at once (see :meth:`RunStore.rt_commit`)."""
        check_commit(changes)
        with self.run_records.lock, self._lock:
            self.run_records.rt_check_fence(run_id, fence)
            if changes and self.rt_get(run_id) is None:
                raise RunNotFoundError(run_id)
            # Nothing below can fail now: the writes land together.
            record = self.rt_update(run_id, changes, fence=fence) if changes else None
            if journal is not None:
                self.rt_journal(run_id, journal[0], journal[1], fence=fence)
            for intent in intents:
                self.rt_intent(intent, fence=fence)
            return self._append(run_id, events), record

    def _append(self, run_id: str, events: Sequence[NewEvent]) -> builtins.list[Event]:
        log = self._events.setdefault(run_id, [])
        added = list(numbered(run_id, events, len(log)))
        log.extend(added)
        return added

    def read_events(
        self, run_id: str, after: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        """Events with offset > ``after``, in order.

        Raises:
            RunNotFoundError: The run has neither checkpoints nor events.
        """
        with self._lock:
            log = self._events.get(run_id)
            if log is None:
                if run_id not in self._runs and self.rt_get(run_id) is None:
                    raise RunNotFoundError(run_id)
                return []
            selected = log[max(after, 0) :]
            return selected[:limit] if limit is not None else builtins.list(selected)

    def load(self, run_id: str, step_index: int | None = None) -> AgentCheckpoint | None:
        """Return the latest checkpoint, or the latest one saved at ``step_index``."""
        with self._lock:
            snapshots = self._runs.get(run_id, [])
            if step_index is None:
                return snapshots[-1] if snapshots else None
            for checkpoint in reversed(snapshots):
                if checkpoint.step_index == step_index:
                    return checkpoint
            return None

    def history(self, run_id: str) -> list[CheckpointInfo]:
        """Metadata of every snapshot of a run, oldest first (empty for an unknown run)."""
        with self._lock:
            return [checkpoint.info() for checkpoint in self._runs.get(run_id, [])]

    def list(self) -> builtins.list[str]:
        """Stored run ids, in order of their first save."""
        with self._lock:
            return builtins.list(self._runs)

    def list_runs(self) -> builtins.list[RunRecord]:
        """One record per run, in order of their first save."""
        with self._lock:
            runs = [(s[0], s[-1], len(s)) for s in self._runs.values()]
        return [RunRecord.from_infos(first.info(), latest.info(), n) for first, latest, n in runs]

    def delete(self, run_id: str) -> None:
        """Forget a run; unknown ids are a no-op."""
        with self._lock:
            self._runs.pop(run_id, None)
            self._events.pop(run_id, None)
        self.run_records.forget(run_id)

    def close(self) -> None:
        """Nothing to release; present so every bundled store can be closed alike."""

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)
