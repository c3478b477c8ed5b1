"""The run-record half of the store seam: what a store with the ``runtime`` capability provides."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..._errors import ConfigurationError, DurableConflictError, LimitExceededError
from ...runs import (
    LateResult,
    RunPatch,
    RuntimeRun,
    Served,
    ToolIntent,
    Verdict,
    claim_notices,
    next_state,
    with_grant_change,
    with_late_result,
)
from .._transient import bounded_wait

if TYPE_CHECKING:
    from ...events._model import Event, NewEvent

__all__ = [
    "COMMIT_CHANGES",
    "RunStore",
    "RuntimeStore",
    "admitted",
    "check_commit",
    "repeated_submission",
]

COMMIT_CHANGES = frozenset({"operations", "model_attempts", "updated_at"})
"""The record fields :meth:`RunStore.rt_commit` may change: counters, never the run's state."""


class RunStore(ABC):
    """What the runtime needs from a store (the ``runtime`` capability): run records.

    Every method that changes a run takes the caller's ``fence`` when the caller
    executes the run; a stale fence raises :class:`~nbdurable.FencedOutError` and changes
    nothing. All methods are synchronous (the SQL stores are quick, local).
    :meth:`rt_commit` and :meth:`ping` are optional, with defaults; the conditional
    changes (verdicts, notices, grants, late results) are written through
    :meth:`rt_change`.
    """

    @abstractmethod
    def rt_insert(
        self, run: RuntimeRun, *, enqueue: bool, max_pending: int
    ) -> tuple[RuntimeRun, bool]:
        """Insert a submitted run: ``(run, True)``, or ``(original, False)`` on a repeat.

        ``max_pending`` bounds the unfinished runs of the run's ``kind`` (agent
        runs and tasks are counted apart).

        Sets ``seq`` and ``state`` (queued behind an unfinished run of its
        session, else pending); a repeated request id returns the original run.

        Raises:
            DurableConflictError: The session is busy and ``enqueue`` is False, or
                the request id was used for a different prompt.
            LimitExceededError: ``max_pending`` unfinished runs exist already.
        """
        ...

    @abstractmethod
    def rt_insert_many(self, runs: Sequence[RuntimeRun], *, max_pending: int) -> list[RuntimeRun]:
        """Insert a batch of new runs at once (a graph's nodes), each in its own session.

        Every run keeps the ``state`` it comes with (``queued`` or ``pending``);
        ``seq`` is assigned in batch order. All or nothing.

        Raises:
            DurableConflictError: A run id exists already.
            LimitExceededError: ``max_pending`` unfinished agent runs would be exceeded.
        """
        ...

    @abstractmethod
    def rt_get(self, run_id: str) -> RuntimeRun | None:
        """The record of a run, or None."""
        ...

    @abstractmethod
    def rt_graph(self, graph_id: str) -> list[RuntimeRun]:
        """The runs of a graph, in submission order."""
        ...

    @abstractmethod
    def rt_list(self, states: Sequence[str] | None = None) -> list[RuntimeRun]:
        """Records in submission order, optionally only those in ``states``."""
        ...

    @abstractmethod
    def rt_session(self, session_id: str, states: Sequence[str]) -> list[RuntimeRun]:
        """One session's records in ``states``, in submission order."""
        ...

    @abstractmethod
    def rt_update(self, run_id: str, patch: RunPatch, *, fence: int | None = None) -> RuntimeRun:
        """Apply ``patch`` (the fields it sets) to a run record.

        A run reaching a terminal state promotes the next queued run of its
        session to pending, and settles its graph's waiting nodes
        (:func:`~nbdurable.runs.settle_graph`), in the same write.

        Raises:
            FencedOutError: ``fence`` is not the run's current fence.
            RunNotFoundError: No such run.
        """
        ...

    @abstractmethod
    def rt_claim(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        agents: Served,
        kind: str = "agent",
    ) -> RuntimeRun | None:
        """Atomically take the next eligible run of ``kind`` with (agent, version) in ``agents``.

        Eligible: the oldest unfinished run of its session that is pending, or
        in retry_wait past ``next_attempt_at``, or running/cancelling with an
        expired lease (its owner died). Sets the lease and bumps the fence.
        A store with a clock of its own (PostgreSQL's) judges and sets leases
        by that clock; ``now`` still dates the rest (``retry_wait``, ``updated_at``).
        ``agents`` maps each served ``(agent, version)`` to the fingerprint of
        its definition: a run submitted under another fingerprint, or of an
        ``(agent, version)`` not served, is never taken, and gets its
        ``waiting_reason`` recorded instead, once
        (:func:`~nbdurable.runs.unclaimable_by_definition`).
        Claims are the embedded engine's: a run submitted to another engine
        is never taken (:func:`~nbdurable.runs.of_engine`).
        """
        ...

    def rt_claim_many(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        agents: Served,
        kind: str = "agent",
        limit: int = 1,
    ) -> list[RuntimeRun]:
        """Up to ``limit`` claims (:meth:`rt_claim`) in one call, in claim order.

        A store may make them in one transaction (SQLite does); this default
        claims one at a time. A failure after the first claim returns the
        claims made (their runs are held now, so the caller must run them);
        one before raises.
        """
        claimed: list[RuntimeRun] = []
        while len(claimed) < limit:
            try:
                record = self.rt_claim(owner, now, lease_ms, agents, kind)
            except Exception:
                if claimed:
                    break
                raise
            if record is None:
                break
            claimed.append(record)
        return claimed

    @abstractmethod
    def rt_renew(
        self, run_id: str, owner: str, fence: int, until: int, *, lease_ms: int | None = None
    ) -> bool:
        """Extend a held lease; False when the lease is no longer ours.

        A store with a clock of its own (PostgreSQL's) extends the lease to its
        clock plus ``lease_ms`` when given; the others to ``until``.
        """
        ...

    @abstractmethod
    def rt_intent(self, intent: ToolIntent, *, fence: int) -> None:
        """Write (or complete) a tool intent, fenced."""
        ...

    @abstractmethod
    def rt_intents(self, run_id: str) -> list[ToolIntent]:
        """A run's tool intents."""
        ...

    @abstractmethod
    def rt_journal(self, run_id: str, step_index: int, response: str, *, fence: int) -> None:
        """Record a completed model response of a step, fenced."""
        ...

    @abstractmethod
    def rt_journaled(self, run_id: str, step_index: int) -> str | None:
        """The journaled model response of a step, if any."""
        ...

    def rt_change(
        self, run_id: str, rule: Callable[[RuntimeRun], RuntimeRun | None]
    ) -> tuple[RuntimeRun, bool]:
        """Apply ``rule`` to a run's record in one transaction, around its read and write.

        The one write behind :meth:`rt_verdict`, :meth:`rt_claim_notices`,
        :meth:`rt_grants` and :meth:`rt_late_result`: ``rule`` is one of the pure
        rules of :mod:`nbdurable.runs`, given the record as stored; the record it
        returns is written, None leaves it as it is. Not fenced. A store
        implements this, or those four methods (the default raises).

        Returns:
            The record as it is now, and whether ``rule`` changed it.

        Raises:
            RunNotFoundError: No such run.
            Exception: Whatever ``rule`` raised (nothing is written then).
        """
        raise ConfigurationError(f"{type(self).__name__} does not change records by a rule")

    def rt_verdict(self, run_id: str, verdict: Verdict, *, now: int) -> tuple[RuntimeRun, bool]:
        """Record one verdict by :meth:`~nbdurable.runs.Verdict.decide` (:meth:`rt_change`).

        Returns ``(run, True)`` when the verdict was recorded, ``(run, False)``
        when that same verdict was recorded before (a retry: nothing changes).

        Raises:
            ApprovalNotPendingError: Another verdict won, or the run no longer waits.
            RunNotFoundError: No such run.
        """
        return self.rt_change(run_id, lambda run: verdict.decide(run, now))

    def rt_claim_notices(self, run_id: str, keys: Sequence[str]) -> list[str]:
        """Claim notifications by :func:`~nbdurable.runs.claim_notices` (:meth:`rt_change`).

        Returns the keys this call claimed (those no one claimed before); the
        caller, and no other process, sends them.

        Raises:
            RunNotFoundError: No such run.
        """
        claimed: list[str] = []

        def rule(run: RuntimeRun) -> RuntimeRun | None:
            updated, claimed[:] = claim_notices(run, keys)
            return updated

        self.rt_change(run_id, rule)
        return claimed

    def rt_grants(
        self, run_id: str, *, add: str | None = None, revoke: str | None = None, now: int
    ) -> RuntimeRun:
        """Add or revoke a grant by :func:`~nbdurable.runs.with_grant_change` (:meth:`rt_change`).

        Concurrent grants and revocations all land. Not fenced: any process may
        grant or revoke while another owns the run.

        Raises:
            RunNotFoundError: No such run.
        """
        change = functools.partial(with_grant_change, add=add, revoke=revoke, now=now)
        return self.rt_change(run_id, change)[0]

    def rt_late_result(self, run_id: str, late: LateResult, *, now: int) -> RuntimeRun:
        """Add a late result by :func:`~nbdurable.runs.with_late_result` (:meth:`rt_change`).

        Not fenced, by design: the owner that lost the run writes it, and only
        ``late_results`` (and ``updated_at``) change. The same one again is a no-op.

        Raises:
            RunNotFoundError: No such run.
        """
        return self.rt_change(run_id, lambda run: with_late_result(run, late, now=now))[0]

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
        """Write several of a run owner's changes, all or nothing, if ``fence`` is still the run's.

        Optional: a store declaring :attr:`~nbdurable.durable.store.Capability.COMMIT`
        implements it; the runtime makes the separate calls (``rt_journal``,
        ``rt_update``, ``rt_intent``, ``append_events``) on any other. Written
        together they commit at once (one fsync on SQLite, one round trip on a
        remote store) and are fenced once.

        Args:
            run_id: The run written to.
            fence: The owner's fencing token.
            events: Appended to the run's log, offsets continuing from its last one.
            journal: ``(step_index, response JSON)``: as ``rt_journal``.
            changes: Applied to the run record, as ``rt_update`` (only
                :data:`COMMIT_CHANGES`: a change of state has its own write).
            intents: Written or completed, as ``rt_intent``.

        Returns:
            The events as stored, and the updated record (None without ``changes``).

        Raises:
            FencedOutError: ``fence`` is not the run's current fence; nothing is written.
            RunNotFoundError: ``changes`` for a run that has no record.
            ConfigurationError: ``changes`` names a field outside :data:`COMMIT_CHANGES`,
                or the store does not declare the ``commit`` capability (the default).
        """
        raise ConfigurationError(f"{type(self).__name__} does not write changes together")

    def ping(self, timeout: float) -> None:
        """Raise unless the store answers within ``timeout`` seconds (a readiness check).

        The default reads a run record, its waits inside the store bounded
        (:func:`~nbdurable.durable._transient.bounded_wait`); a pooled store
        asks on a connection of its own, so the check never queues behind calls
        waiting for the pool.
        """
        with bounded_wait(timeout):
            self.rt_get("nbdurable-readyz")

    def watch_work(self, callback: Callable[[str], None]) -> Callable[[], None] | None:
        """Call ``callback(kind)`` when another process may have made a run claimable.

        A store that notifies (PostgreSQL: ``LISTEN``/``NOTIFY`` on a submission,
        a verdict, a release) returns the function that stops the calls; an idle
        runtime then waits for them and polls only every ``idle_poll_interval``.
        The default: None (no notifications; the runtime polls every
        ``poll_interval``).
        """
        return None

    def notifies_work(self) -> bool:
        """Whether :meth:`watch_work`'s callbacks are being called now (default: False)."""
        return False


RuntimeStore = RunStore
"""The former name of :class:`RunStore`."""


def check_commit(changes: RunPatch | None) -> None:
    """Refuse record changes :meth:`RunStore.rt_commit` may not make.

    Raises:
        ConfigurationError: A field outside :data:`COMMIT_CHANGES`.
    """
    extra = sorted((changes.fields_set if changes else frozenset()) - COMMIT_CHANGES)
    if extra:
        raise ConfigurationError(f"rt_commit cannot change {', '.join(extra)}")


def repeated_submission(original: RuntimeRun, run: RuntimeRun) -> tuple[RuntimeRun, bool]:
    """:meth:`RunStore.rt_insert`'s answer to a request id submitted again: ``(original, False)``.

    Raises:
        DurableConflictError: The request id was used for a different submission.
    """
    if original.prompt != run.prompt or original.agent_id != run.agent_id:
        raise DurableConflictError(
            f"request id {run.request_id!r} was used for a different submission"
        )
    return original, False


def admitted(
    run: RuntimeRun,
    *,
    seq: int,
    pending: int,
    max_pending: int,
    busy: bool,
    enqueue: bool,
    taken: bool,
) -> RuntimeRun:
    """``run`` as :meth:`RunStore.rt_insert` stores it (``seq``; queued when ``busy``), if it may.

    ``pending`` counts the unfinished runs of its kind, ``busy`` says its session
    has one, ``taken`` that its run id exists: what the store read in its transaction.

    Raises:
        LimitExceededError: ``max_pending`` unfinished runs of its kind exist already.
        DurableConflictError: The session is busy and not ``enqueue``, or the run id is taken.
    """
    if pending >= max_pending:
        limit = "max_pending_tasks" if run.kind == "task" else "max_pending_runs"
        raise LimitExceededError(limit, pending + 1, max_pending)
    if busy and not enqueue:
        raise DurableConflictError(
            f"session {run.session_id!r} has an unfinished run; pass enqueue=True "
            "to queue this one behind it"
        )
    if taken:
        raise DurableConflictError(f"run id {run.run_id!r} exists already")
    return RunPatch(seq=seq, state=next_state(busy)).apply(run)
