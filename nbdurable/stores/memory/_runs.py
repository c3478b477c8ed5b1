"""The runtime's tables for the in-memory store (run records, intents, model journal)."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Sequence

from ..._errors import DurableConflictError, FencedOutError, LimitExceededError, RunNotFoundError
from ...durable.store import RunStore, admitted, repeated_submission
from ...runs import (
    TERMINAL_STATES,
    UNFINISHED_STATES,
    RunPatch,
    RuntimeRun,
    Served,
    ToolIntent,
    after_finish,
    claim,
    claimable,
    served,
    unclaimable_by_definition,
)

__all__ = ["MemoryRunRecords"]


class MemoryRunRecords(RunStore):
    """The in-memory store's run records (methods as :class:`~nbdurable.durable.store.RunStore`)."""

    def __init__(self) -> None:
        self._rt_runs: dict[str, RuntimeRun] = {}
        self._rt_requests: dict[str, str] = {}
        self._rt_intents: dict[str, dict[str, ToolIntent]] = {}
        self._rt_journal: dict[tuple[str, int], str] = {}
        self.lock = threading.RLock()
        self._rt_seq = 0

    def rt_insert(
        self, run: RuntimeRun, *, enqueue: bool, max_pending: int
    ) -> tuple[RuntimeRun, bool]:
        with self.lock:
            if run.request_id is not None and run.request_id in self._rt_requests:
                return repeated_submission(self._rt_runs[self._rt_requests[run.request_id]], run)
            unfinished = [r for r in self._rt_runs.values() if r.state in UNFINISHED_STATES]
            stored = admitted(
                run,
                seq=self._rt_seq + 1,
                pending=sum(r.kind == run.kind for r in unfinished),
                max_pending=max_pending,
                busy=any(r.session_id == run.session_id for r in unfinished),
                enqueue=enqueue,
                taken=run.run_id in self._rt_runs,
            )
            self._rt_seq = stored.seq
            self._rt_runs[run.run_id] = stored
            if run.request_id is not None:
                self._rt_requests[run.request_id] = run.run_id
            return stored, True

    def rt_insert_many(
        self, runs: Sequence[RuntimeRun], *, max_pending: int
    ) -> builtins.list[RuntimeRun]:
        with self.lock:
            count = sum(
                r.kind == "agent" and r.state in UNFINISHED_STATES for r in self._rt_runs.values()
            )
            if count + len(runs) > max_pending:
                raise LimitExceededError("max_pending_runs", count + len(runs), max_pending)
            for run in runs:
                if run.run_id in self._rt_runs:
                    raise DurableConflictError(f"run id {run.run_id!r} exists already")
            stored = []
            for run in runs:
                self._rt_seq += 1
                stored.append(RunPatch(seq=self._rt_seq).apply(run))
            for run in stored:
                self._rt_runs[run.run_id] = run
            return stored

    def rt_get(self, run_id: str) -> RuntimeRun | None:
        with self.lock:
            return self._rt_runs.get(run_id)

    def rt_graph(self, graph_id: str) -> builtins.list[RuntimeRun]:
        with self.lock:
            runs = [r for r in self._rt_runs.values() if r.graph_id == graph_id]
        return sorted(runs, key=lambda r: r.seq)

    def rt_list(self, states: Sequence[str] | None = None) -> builtins.list[RuntimeRun]:
        with self.lock:
            runs = sorted(self._rt_runs.values(), key=lambda r: r.seq)
        return [r for r in runs if states is None or r.state in states]

    def rt_session(self, session_id: str, states: Sequence[str]) -> builtins.list[RuntimeRun]:
        with self.lock:
            runs = [
                r
                for r in self._rt_runs.values()
                if r.session_id == session_id and r.state in states
            ]
        return sorted(runs, key=lambda r: r.seq)

    def rt_update(self, run_id: str, patch: RunPatch, *, fence: int | None = None) -> RuntimeRun:
        with self.lock:
            current = self._rt_runs.get(run_id)
            if current is None:
                raise RunNotFoundError(run_id)
            if fence is not None and current.fence != fence:
                raise FencedOutError(f"run {run_id!r} is owned by another runtime now")
            # the text policy the other stores apply when they serialize the record
            updated = patch.apply(current)
            self._rt_runs[run_id] = updated
            if updated.state in TERMINAL_STATES and current.state not in TERMINAL_STATES:
                waiting = [
                    r
                    for r in self._rt_runs.values()
                    if r.session_id == updated.session_id and r.state in UNFINISHED_STATES
                ]
                head = min(waiting, key=lambda r: r.seq) if waiting else None
                graph = [
                    r
                    for r in self._rt_runs.values()
                    if updated.graph_id is not None and r.graph_id == updated.graph_id
                ]
                for run in after_finish(updated, head, graph):
                    self._rt_runs[run.run_id] = run
            return updated

    def rt_change(
        self, run_id: str, rule: Callable[[RuntimeRun], RuntimeRun | None]
    ) -> tuple[RuntimeRun, bool]:
        """Apply ``rule`` to the record under the lock (``RunStore.rt_change``)."""
        with self.lock:
            current = self._rt_runs.get(run_id)
            if current is None:
                raise RunNotFoundError(run_id)
            updated = rule(current)
            if updated is None:
                return current, False
            self._rt_runs[run_id] = updated
            return updated, True

    def rt_claim(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        agents: Served,
        kind: str = "agent",
    ) -> RuntimeRun | None:
        """Take the next eligible run: the oldest unfinished of its session, agent known."""
        allowed = served(agents)
        with self.lock:
            heads: dict[str, RuntimeRun] = {}
            for run in sorted(self._rt_runs.values(), key=lambda r: r.seq):
                if run.state in UNFINISHED_STATES and run.session_id not in heads:
                    heads[run.session_id] = run
            for run in sorted(heads.values(), key=lambda r: r.seq):
                if claimable(run, now, allowed, kind):
                    claimed = claim(run, owner, now, lease_ms)
                    self._rt_runs[run.run_id] = claimed
                    return claimed
                if (waiting := unclaimable_by_definition(run, now, allowed, kind)) is not None:
                    self._rt_runs[waiting.run_id] = waiting  # once: the reason is then recorded
            return None

    def rt_renew(
        self, run_id: str, owner: str, fence: int, until: int, *, lease_ms: int | None = None
    ) -> bool:
        """Extend a held lease.

        ``lease_ms`` is not used: the store has no clock of its own, so ``until``
        (the caller's clock) holds.
        """
        with self.lock:
            run = self._rt_runs.get(run_id)
            if run is None or run.fence != fence or run.lease_owner != owner:
                return False
            self._rt_runs[run_id] = RunPatch(lease_expires_at=until).apply(run)
            return True

    def rt_check_fence(self, run_id: str, fence: int) -> None:
        """Raise :class:`FencedOutError` unless ``fence`` is the run's current one."""
        with self.lock:
            run = self._rt_runs.get(run_id)
            if run is not None and run.fence != fence:
                raise FencedOutError(f"run {run_id!r} is owned by another runtime now")

    def rt_intent(self, intent: ToolIntent, *, fence: int) -> None:
        with self.lock:
            self.rt_check_fence(intent.run_id, fence)
            self._rt_intents.setdefault(intent.run_id, {})[intent.tool_call_id] = intent

    def rt_intents(self, run_id: str) -> builtins.list[ToolIntent]:
        with self.lock:
            return builtins.list(self._rt_intents.get(run_id, {}).values())

    def rt_journal(self, run_id: str, step_index: int, response: str, *, fence: int) -> None:
        with self.lock:
            self.rt_check_fence(run_id, fence)
            self._rt_journal[(run_id, step_index)] = response

    def rt_journaled(self, run_id: str, step_index: int) -> str | None:
        with self.lock:
            return self._rt_journal.get((run_id, step_index))

    def forget(self, run_id: str) -> None:
        with self.lock:
            run = self._rt_runs.pop(run_id, None)
            if run is not None and run.request_id is not None:
                self._rt_requests.pop(run.request_id, None)
            self._rt_intents.pop(run_id, None)
            for key in [k for k in self._rt_journal if k[0] == run_id]:
                del self._rt_journal[key]
