"""The runtime's tables in the PostgreSQL store: run records, intents, the model journal.

The same layout as the SQLite store's (:mod:`..sqlite._runs`): a run record is
kept whole as JSON text (``record``), with the columns the scheduler queries
beside it. The tables and every statement are in :mod:`._runs_sql`.

Several processes may share the tables, and no write takes a lock wider than
the rows it concerns (workers on different runs never wait for each other):

- a write of one run (update, verdict, renewal, fenced write) locks that run's
  row (``FOR UPDATE``, or ``FOR SHARE`` to check a fence): a claim that bumps
  the fence waits for a fenced write to commit, and a write after the claim
  sees the new fence and is refused;
- a claim takes the oldest eligible run of the agents it serves with
  ``FOR UPDATE SKIP LOCKED``: two claims never take one run, and neither waits
  for a run the other holds. Its query reads an index of the served
  ``(agent_id, agent_version)`` with a ``LIMIT``, so runs of agents it does not
  serve cost it nothing;
- what must see one order per session or graph (a submission choosing
  ``pending`` or ``queued``, a finish promoting the session's next run or a
  graph's nodes) locks a row of ``rt_locks`` named after the session, the
  request id or the graph: submissions and finishes of one session queue
  there, those of different sessions do not;
- a write that makes work claimable (a submission, a verdict, a release, a
  retry) sends ``NOTIFY`` on the store's work channel at commit, so idle
  workers wake at once and poll only rarely; so does any transaction that
  locked a pending run's row (a fenced event, a waiting reason): a claim
  meanwhile skipped that row and went to sleep.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..._errors import DurableConflictError, FencedOutError, LimitExceededError, RunNotFoundError
from ...durable._stored import validate_stored
from ...durable.store import RunStore, admitted, repeated_submission
from ...runs import (
    ACTIVE_STATES,
    CLAIMABLE_STATES,
    TERMINAL_STATES,
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
from .._rows import runtime_row
from ._connect import ping_pool
from ._runs_sql import CLAIM_CANDIDATES, candidate_statement, statements, unnoted_statement

if TYPE_CHECKING:
    from psycopg import Connection

    from ._db import PostgresDb

__all__ = [
    "WORK_STATES",
    "PostgresRunRecords",
]

WORK_STATES = CLAIMABLE_STATES
"""States a write moves a run into that make it claimable (the work channel is notified)."""

T = TypeVar("T")


def _due_at(run: RuntimeRun) -> int | None:
    """When ``run`` is claimable (epoch ms; 0: now), None in a state no claim takes."""
    if run.state == "pending":
        return 0
    if run.state == "retry_wait":
        return run.next_attempt_at or 0
    if run.state in ACTIVE_STATES:
        return run.lease_expires_at or 0
    return None


def _row(run: RuntimeRun) -> tuple[object, ...]:
    """``run`` as a row of ``rt_runs``: the shared columns, the claim's, then the JSON."""
    *columns, record = runtime_row(run)
    claim_columns = (
        run.agent_id,
        run.agent_version,
        run.engine,
        _due_at(run),
        run.waiting_reason is not None,
    )
    return (*columns, *claim_columns, record)


def _record(text: str) -> RuntimeRun:
    return validate_stored(RuntimeRun, text)


def _keys(*runs: RuntimeRun, graph: bool = True) -> list[str]:
    """The ``rt_locks`` rows ordering writes of ``runs``' sessions, request ids (and graphs)."""
    keys = {f"session:{run.session_id}" for run in runs}
    keys |= {f"request:{run.request_id}" for run in runs if run.request_id is not None}
    if graph:
        keys |= {f"graph:{run.graph_id}" for run in runs if run.graph_id is not None}
    return sorted(keys)


class PostgresRunRecords(RunStore):
    """The run-record part of :class:`~nbdurable.stores.postgres.PostgresSessionStore`.

    Its methods do what :class:`~nbdurable.durable.store.RunStore` says.

    Args:
        db: The schema's connection, shared with the store's other parts.
    """

    def __init__(self, db: PostgresDb) -> None:
        self._db = db
        self._rq = statements(db.schema)

    def write(self, work: Callable[[Connection[tuple[Any, ...]]], T]) -> T:
        """``work`` in one transaction (again after a deadlock or serialization failure)."""

        def run(conn: Connection[tuple[Any, ...]]) -> T:
            with conn.transaction():
                return work(conn)

        return self._db.transact(run)

    def _rt_put(self, conn: Connection[tuple[Any, ...]], run: RuntimeRun) -> None:
        conn.execute(self._rq.put, _row(run))
        if run.state == "pending":
            # A claim that met this row locked skipped it (SKIP LOCKED) and may be
            # asleep now: it is claimable at commit, so say so then.
            self._announce_work(conn, run.kind)

    def _lock(self, conn: Connection[tuple[Any, ...]], keys: Sequence[str]) -> None:
        """Lock the ``rt_locks`` rows ``keys`` (sorted) until commit."""
        if keys:
            conn.execute(self._rq.lock_keys, (builtins.list(keys),))

    def _announce_work(self, conn: Connection[tuple[Any, ...]], kind: str) -> None:
        """Wake idle workers at commit: a run of ``kind`` may be claimable now."""
        conn.execute(self._rq.announce, (self._db.work_channel, kind))

    def rt_insert(
        self, run: RuntimeRun, *, enqueue: bool, max_pending: int
    ) -> tuple[RuntimeRun, bool]:

        def insert(conn: Connection[tuple[Any, ...]]) -> tuple[RuntimeRun, bool]:
            # Submissions of one session (or request id) queue here: each sees
            # whether the session is busy after the one before it committed.
            self._lock(conn, _keys(run, graph=False))
            facts = conn.execute(
                self._rq.submit_facts,
                {
                    "request_id": run.request_id,
                    "session_id": run.session_id,
                    "run_id": run.run_id,
                    "kind": run.kind,
                },
            ).fetchone()
            assert facts is not None  # a SELECT without FROM returns one row
            found, pending, busy, taken, seq = facts
            if run.request_id is not None and found is not None:
                return repeated_submission(_record(found), run)
            stored = admitted(
                run,
                seq=int(seq),
                pending=pending,
                max_pending=max_pending,
                busy=busy,
                enqueue=enqueue,
                taken=taken,
            )
            self._rt_put(conn, stored)
            if stored.state in WORK_STATES:
                self._announce_work(conn, stored.kind)
            return stored, True

        return self.write(insert)

    def rt_insert_many(
        self, runs: Sequence[RuntimeRun], *, max_pending: int
    ) -> builtins.list[RuntimeRun]:

        def insert(conn: Connection[tuple[Any, ...]]) -> builtins.list[RuntimeRun]:
            self._lock(conn, _keys(*runs))
            found = conn.execute(self._rq.count_kind, ("agent",)).fetchone()
            pending = int(found[0]) if found is not None else 0
            if pending + len(runs) > max_pending:
                raise LimitExceededError("max_pending_runs", pending + len(runs), max_pending)
            taken = conn.execute(self._rq.taken, ([run.run_id for run in runs],)).fetchone()
            if taken is not None:
                raise DurableConflictError(f"run id {taken[0]!r} exists already")
            seqs = [int(s) for (s,) in conn.execute(self._rq.next_seqs, (len(runs),))]
            stored = [RunPatch(seq=seq).apply(run) for seq, run in zip(seqs, runs, strict=True)]
            for run in stored:
                self._rt_put(conn, run)
            for kind in sorted({run.kind for run in stored if run.state in WORK_STATES}):
                self._announce_work(conn, kind)
            return stored

        return self.write(insert)

    def rt_graph(self, graph_id: str) -> builtins.list[RuntimeRun]:
        with self._db.pool.connection() as conn:
            rows = conn.execute(self._rq.graph, (graph_id,)).fetchall()
        return [_record(text) for (text,) in rows]

    def rt_get(self, run_id: str) -> RuntimeRun | None:
        with self._db.pool.connection() as conn:
            found = conn.execute(self._rq.get, (run_id,)).fetchone()
        return None if found is None else _record(found[0])

    def ping(self, timeout: float) -> None:
        """Read a run record on a connection of its own, within about ``timeout`` seconds.

        The readiness probe's check (``/readyz``): it never waits for one of the
        pool's connections, so it answers whatever the calls queued there do.

        Raises:
            TimeoutError: The previous probe has not returned.
            psycopg.OperationalError: The server cannot be reached.
        """
        ping_pool(self._db.pool, self._rq.get, ("nbdurable-readyz",), timeout)

    def rt_list(self, states: Sequence[str] | None = None) -> builtins.list[RuntimeRun]:
        with self._db.pool.connection() as conn:
            if states is None:
                rows = conn.execute(self._rq.list_all).fetchall()
            else:
                rows = conn.execute(self._rq.list_states, (builtins.list(states),)).fetchall()
        return [_record(text) for (text,) in rows]

    def rt_session(self, session_id: str, states: Sequence[str]) -> builtins.list[RuntimeRun]:
        with self._db.pool.connection() as conn:
            rows = conn.execute(
                self._rq.session_states, (session_id, builtins.list(states))
            ).fetchall()
        return [_record(text) for (text,) in rows]

    def rt_update(self, run_id: str, patch: RunPatch, *, fence: int | None = None) -> RuntimeRun:

        def update(conn: Connection[tuple[Any, ...]]) -> RuntimeRun:
            found = conn.execute(self._rq.get_for_update, (run_id,)).fetchone()
            if found is None:
                raise RunNotFoundError(run_id)
            current = _record(found[0])
            if fence is not None and current.fence != fence:
                raise FencedOutError(f"run {run_id!r} is owned by another runtime now")
            updated = patch.apply(current)
            self._rt_put(conn, updated)
            work = updated.state in WORK_STATES and updated.state != current.state
            if updated.state in TERMINAL_STATES and current.state not in TERMINAL_STATES:
                # A finish promotes the session's next run and settles the graph:
                # finishes and submissions of that session or graph queue on its
                # lock rows, and read the runs they change locked, after it.
                self._lock(conn, _keys(updated))
                head = conn.execute(self._rq.session_head, (updated.session_id,)).fetchone()
                rows = []
                if updated.graph_id is not None:
                    rows = conn.execute(self._rq.graph_for_update, (updated.graph_id,)).fetchall()
                session_head = _record(head[0]) if head is not None else None
                graph = [_record(text) for (text,) in rows]
                for run in after_finish(updated, session_head, graph):
                    self._rt_put(conn, run)
                    work = work or run.state in WORK_STATES
            if updated.state != current.state:
                # A state change's events are appended before its record: this
                # notification tells other processes' record mirrors to read it again.
                notice = run_id if len(run_id.encode()) < 8000 else ""
                conn.execute(self._rq.announce, (self._db.notify_channel, notice))
            if work:
                self._announce_work(conn, updated.kind)
            return updated

        return self.write(update)

    def rt_change(
        self, run_id: str, rule: Callable[[RuntimeRun], RuntimeRun | None]
    ) -> tuple[RuntimeRun, bool]:
        """Apply ``rule`` to the record, the row read ``FOR UPDATE`` (``RunStore.rt_change``)."""

        def change(conn: Connection[tuple[Any, ...]]) -> tuple[RuntimeRun, bool]:
            found = conn.execute(self._rq.get_for_update, (run_id,)).fetchone()
            if found is None:
                raise RunNotFoundError(run_id)
            current = _record(found[0])
            updated = rule(current)
            if updated is None:
                return current, False
            self._rt_put(conn, updated)
            if updated.state in WORK_STATES and updated.state != current.state:
                self._announce_work(conn, updated.kind)
            return updated, True

        return self.write(change)

    def rt_claim(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        agents: Served,
        kind: str = "agent",
    ) -> RuntimeRun | None:
        """Take the next eligible run of ``kind`` (the oldest unfinished of its session).

        One bounded, indexed query over the served ``(agent, version)`` pairs
        locks a candidate (``FOR UPDATE SKIP LOCKED``); the shared rules
        (:func:`~nbdurable.runs.claimable`) decide on it. When nothing is
        claimable, eligible runs of agents not served here that no claim noted
        yet get their waiting reason (a few per poll, each once).
        """
        allowed = served(agents)
        pairs = sorted(allowed)
        params: dict[str, Any] = {"kinds": [kind]}
        for i, (agent_id, version) in enumerate(pairs):
            params[f"a{i}"], params[f"v{i}"] = agent_id, version
        candidate = candidate_statement(self._db.schema, len(pairs))
        unnoted = unnoted_statement(self._db.schema, len(pairs))

        def take(conn: Connection[tuple[Any, ...]]) -> RuntimeRun | None:
            # Leases are judged and set by the database's clock, not the caller's
            # ``now``: hosts whose clocks disagree still agree on expiry.
            db_now = self._rt_db_now(conn)
            params["now"] = max(now, db_now)
            skip: builtins.list[str] = []
            for _ in range(CLAIM_CANDIDATES if pairs else 0):
                params["skip"] = skip
                found = conn.execute(candidate, params).fetchone()
                if found is None:
                    break
                run = _record(found[0])
                if claimable(run, db_now if run.state in ACTIVE_STATES else now, allowed, kind):
                    claimed = claim(run, owner, now, lease_ms)
                    claimed = RunPatch(lease_expires_at=db_now + lease_ms).apply(claimed)
                    self._rt_put(conn, claimed)
                    return claimed
                self._note(run, now, allowed, kind, conn)
                skip.append(run.run_id)
            rows = conn.execute(unnoted, params).fetchall()
            noted = [
                unclaimable_by_definition(_record(text), now, allowed, kind) for (text,) in rows
            ]
            writes = [_row(run) for run in noted if run is not None]
            if writes:  # one round trip for the batch
                conn.cursor().executemany(self._rq.put, writes)
            return None

        return self.write(take)

    def _note(
        self,
        run: RuntimeRun,
        now: int,
        allowed: Served,
        kind: str,
        conn: Connection[tuple[Any, ...]],
    ) -> None:
        """Record why ``run`` waits, when only the served agents keep it from a claim (once)."""
        if (waiting := unclaimable_by_definition(run, now, allowed, kind)) is not None:
            self._rt_put(conn, waiting)

    def rt_renew(
        self, run_id: str, owner: str, fence: int, until: int, *, lease_ms: int | None = None
    ) -> bool:
        """Extend a held lease; False when it is not ours any more.

        With ``lease_ms`` the lease runs until the database's clock plus
        ``lease_ms`` (``until``, the caller's clock, is then not used).
        """

        def renew(conn: Connection[tuple[Any, ...]]) -> bool:
            found = conn.execute(self._rq.renewable, (run_id, fence)).fetchone()
            if found is None:
                return False
            run = _record(found[0])
            if run.lease_owner != owner:
                return False
            expires = until if lease_ms is None else self._rt_db_now(conn) + lease_ms
            self._rt_put(conn, RunPatch(lease_expires_at=expires).apply(run))
            return True

        return self.write(renew)

    def _rt_db_now(self, conn: Connection[tuple[Any, ...]]) -> int:
        """The database server's clock, epoch ms (the time of the call, not of the transaction)."""
        found = conn.execute(self._rq.db_now).fetchone()
        assert found is not None  # a SELECT without FROM returns one row
        return int(found[0])

    def rt_check_fence(
        self, run_id: str, fence: int, conn: Connection[tuple[Any, ...]] | None = None
    ) -> None:
        """Raise :class:`FencedOutError` unless ``fence`` is the run's current one.

        Inside a transaction (``conn``), the run's row stays share-locked until
        commit: a claim bumping the fence waits for the write it checked.
        """
        if conn is None:
            with self._db.pool.connection() as own:
                found = own.execute(self._rq.fence_for_share, (run_id,)).fetchone()
        else:
            found = conn.execute(self._rq.fence_for_share, (run_id,)).fetchone()
        if found is not None and found[0] != fence:
            raise FencedOutError(f"run {run_id!r} is owned by another runtime now")
        if conn is not None and found is not None and found[1] == 0:
            # A pending run's row share-locked until commit (the submitter's fenced
            # "pending" event): a claim skips it meanwhile (SKIP LOCKED) and sleeps,
            # so the commit wakes the claims again.
            self._announce_work(conn, found[2])

    def rt_intent(self, intent: ToolIntent, *, fence: int) -> None:

        def write(conn: Connection[tuple[Any, ...]]) -> None:
            self.rt_check_fence(intent.run_id, fence, conn)
            conn.execute(
                self._rq.put_intent,
                (intent.run_id, intent.tool_call_id, intent.model_dump_json()),
            )

        self.write(write)

    def combined(
        self,
        conn: Connection[tuple[Any, ...]],
        run_id: str,
        fence: int,
        journal: tuple[int, str] | None,
        changes: RunPatch | None,
        intents: Sequence[ToolIntent],
    ) -> RuntimeRun | None:
        """The run-record part of ``rt_commit``, inside its transaction."""
        record = None
        if changes:
            # The row locked for update checks the fence too (no share lock to upgrade).
            found = conn.execute(self._rq.get_for_update, (run_id,)).fetchone()
            if found is None:
                raise RunNotFoundError(run_id)
            current = _record(found[0])
            if current.fence != fence:
                raise FencedOutError(f"run {run_id!r} is owned by another runtime now")
            record = changes.apply(current)
            self._rt_put(conn, record)
            if record.state in WORK_STATES and record.state != current.state:
                self._announce_work(conn, record.kind)  # a release or a retry wait
        else:
            self.rt_check_fence(run_id, fence, conn)
        if journal is not None:
            conn.execute(self._rq.put_journal, (run_id, journal[0], journal[1]))
        for intent in intents:
            conn.execute(
                self._rq.put_intent, (intent.run_id, intent.tool_call_id, intent.model_dump_json())
            )
        return record

    def rt_intents(self, run_id: str) -> builtins.list[ToolIntent]:
        with self._db.pool.connection() as conn:
            rows = conn.execute(self._rq.intents, (run_id,)).fetchall()
        return [validate_stored(ToolIntent, text) for (text,) in rows]

    def rt_journal(self, run_id: str, step_index: int, response: str, *, fence: int) -> None:

        def write(conn: Connection[tuple[Any, ...]]) -> None:
            self.rt_check_fence(run_id, fence, conn)
            conn.execute(self._rq.put_journal, (run_id, step_index, response))

        self.write(write)

    def rt_journaled(self, run_id: str, step_index: int) -> str | None:
        with self._db.pool.connection() as conn:
            found = conn.execute(self._rq.journaled, (run_id, step_index)).fetchone()
        return None if found is None else str(found[0])

    def forget(self, conn: Connection[tuple[Any, ...]], run_ids: Sequence[str]) -> None:
        """Delete the records, intents, journal and lock rows of ``run_ids``, in ``conn``."""
        ids = builtins.list(run_ids)
        conn.execute(self._rq.forget_keys, {"ids": ids})  # before the records it reads
        for statement in self._rq.forget:
            conn.execute(statement, (ids,))
