"""A run store composed from a part: every :class:`RunStore` method passed to it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ...runs import RunPatch, RuntimeRun, Served, ToolIntent
from ._runs import RunStore

if TYPE_CHECKING:
    from ...events._model import Event, NewEvent

__all__ = ["DelegatingRunStore"]


class DelegatingRunStore(RunStore):
    """A :class:`RunStore` whose run records another object keeps: :attr:`run_records`.

    The bundled SQL stores are compositions: their run-record part is a complete
    :class:`RunStore` of its own, sharing the store's connection, and the store
    passes every run-record call to it here (an object standing in front of a
    store may do the same). Override a method to do more than pass it on.
    """

    run_records: RunStore
    """The part that keeps the run records (set by the subclass's ``__init__``)."""

    def rt_insert(
        self, run: RuntimeRun, *, enqueue: bool, max_pending: int
    ) -> tuple[RuntimeRun, bool]:
        """See :meth:`RunStore.rt_insert`."""
        return self.run_records.rt_insert(run, enqueue=enqueue, max_pending=max_pending)

    def rt_insert_many(self, runs: Sequence[RuntimeRun], *, max_pending: int) -> list[RuntimeRun]:
        """See :meth:`RunStore.rt_insert_many`."""
        return self.run_records.rt_insert_many(runs, max_pending=max_pending)

    def rt_get(self, run_id: str) -> RuntimeRun | None:
        """See :meth:`RunStore.rt_get`."""
        return self.run_records.rt_get(run_id)

    def rt_graph(self, graph_id: str) -> list[RuntimeRun]:
        """See :meth:`RunStore.rt_graph`."""
        return self.run_records.rt_graph(graph_id)

    def rt_list(self, states: Sequence[str] | None = None) -> list[RuntimeRun]:
        """See :meth:`RunStore.rt_list`."""
        return self.run_records.rt_list(states)

    def rt_session(self, session_id: str, states: Sequence[str]) -> list[RuntimeRun]:
        """See :meth:`RunStore.rt_session`."""
        return self.run_records.rt_session(session_id, states)

    def rt_update(self, run_id: str, patch: RunPatch, *, fence: int | None = None) -> RuntimeRun:
        """See :meth:`RunStore.rt_update`."""
        return self.run_records.rt_update(run_id, patch, fence=fence)

    def rt_change(
        self, run_id: str, rule: Callable[[RuntimeRun], RuntimeRun | None]
    ) -> tuple[RuntimeRun, bool]:
        """See :meth:`RunStore.rt_change`."""
        return self.run_records.rt_change(run_id, rule)

    def rt_claim(
        self, owner: str, now: int, lease_ms: int, agents: Served, kind: str = "agent"
    ) -> RuntimeRun | None:
        """See :meth:`RunStore.rt_claim`."""
        return self.run_records.rt_claim(owner, now, lease_ms, agents, kind)

    def rt_claim_many(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        agents: Served,
        kind: str = "agent",
        limit: int = 1,
    ) -> list[RuntimeRun]:
        """See :meth:`RunStore.rt_claim_many`."""
        return self.run_records.rt_claim_many(owner, now, lease_ms, agents, kind, limit)

    def rt_renew(
        self, run_id: str, owner: str, fence: int, until: int, *, lease_ms: int | None = None
    ) -> bool:
        """See :meth:`RunStore.rt_renew`."""
        return self.run_records.rt_renew(run_id, owner, fence, until, lease_ms=lease_ms)

    def rt_intent(self, intent: ToolIntent, *, fence: int) -> None:
        """See :meth:`RunStore.rt_intent`."""
        self.run_records.rt_intent(intent, fence=fence)

    def rt_intents(self, run_id: str) -> list[ToolIntent]:
        """See :meth:`RunStore.rt_intents`."""
        return self.run_records.rt_intents(run_id)

    def rt_journal(self, run_id: str, step_index: int, response: str, *, fence: int) -> None:
        """See :meth:`RunStore.rt_journal`."""
        self.run_records.rt_journal(run_id, step_index, response, fence=fence)

    def rt_journaled(self, run_id: str, step_index: int) -> str | None:
        """See :meth:`RunStore.rt_journaled`."""
        return self.run_records.rt_journaled(run_id, step_index)

    def rt_commit(
        self,
        run_id: str,
        *,
        fence: int,
        events: Sequence[NewEvent] = (),
        journal: tuple[int, str] | None = None,
        changes: RunPatch | None = None,
        intents: Sequence[ToolIntent] = (),
    ) -> tuple[Sequence[Event], RuntimeRun | None]:
        """See :meth:`RunStore.rt_commit`."""
        return self.run_records.rt_commit(
            run_id, fence=fence, events=events, journal=journal, changes=changes, intents=intents
        )

    def ping(self, timeout: float) -> None:
        """See :meth:`RunStore.ping`."""
        self.run_records.ping(timeout)
