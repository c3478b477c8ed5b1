"""The runtime's tables in the PostgreSQL store: run records, intents, the model journal.

The same layout as the SQLite store's (:mod:`..sqlite._runs`): a run record is
kept whole as JSON text (``record``), with the columns the scheduler queries
beside it. Schema version 3 adds the tables (:data:`RUNTIME_MIGRATION`), version
5 the claim's columns, indexes and lock rows (:data:`RUNTIME_MIGRATION_V5`).

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
  workers wake at once and poll only rarely.
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..._errors import DurableConflictError, FencedOutError, LimitExceededError, RunNotFoundError
from ...durable._stored import validate_stored
from ...durable.store import RunStore, admitted, repeated_submission
from ...runs import (
    ACTIVE_STATES,
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
from .._rows import runtime_row
from ._connect import ping_pool

if TYPE_CHECKING:
    from psycopg import Connection

    from ._db import PostgresDb

__all__ = [
    "RUNTIME_MIGRATION",
    "RUNTIME_MIGRATION_V4",
    "RUNTIME_MIGRATION_V5",
    "WORK_STATES",
    "PostgresRunRecords",
    "candidate_statement",
    "unnoted_statement",
]

T = TypeVar("T")

RUNTIME_MIGRATION: tuple[str, ...] = (
    """CREATE TABLE {s}.rt_runs (
        run_id text PRIMARY KEY,
        seq bigint NOT NULL UNIQUE,
        session_id text NOT NULL,
        state text NOT NULL,
        request_id text UNIQUE,
        fence bigint NOT NULL,
        record text NOT NULL
    )""",
    "CREATE INDEX rt_runs_session ON {s}.rt_runs (session_id, state, seq)",
    "CREATE INDEX rt_runs_state ON {s}.rt_runs (state, seq)",
    """CREATE TABLE {s}.rt_intents (
        run_id text NOT NULL,
        tool_call_id text NOT NULL,
        intent text NOT NULL,
        PRIMARY KEY (run_id, tool_call_id)
    )""",
    """CREATE TABLE {s}.rt_journal (
        run_id text NOT NULL,
        step_index integer NOT NULL,
        response text NOT NULL,
        PRIMARY KEY (run_id, step_index)
    )""",
)
"""Schema version 3: ``rt_runs``, ``rt_intents``, ``rt_journal`` (``{s}``: the quoted schema)."""

RUNTIME_MIGRATION_V4: tuple[str, ...] = (
    "ALTER TABLE {s}.rt_runs ADD COLUMN kind text NOT NULL DEFAULT 'agent'",
    "ALTER TABLE {s}.rt_runs ADD COLUMN graph_id text",
    "CREATE INDEX rt_runs_kind ON {s}.rt_runs (kind, state)",
    "CREATE INDEX rt_runs_graph ON {s}.rt_runs (graph_id, seq)",
)
"""Schema version 4: ``kind`` and ``graph_id`` columns of ``rt_runs`` (tasks and graphs)."""

_CLAIMABLE_STATES = ("pending", "retry_wait", "running", "cancelling")
_CLAIMABLE = "state IN ('pending', 'retry_wait', 'running', 'cancelling')"
_EMBEDDED = "(engine IS NULL OR engine = 'embedded')"

RUNTIME_MIGRATION_V5: tuple[str, ...] = (
    "ALTER TABLE {s}.rt_runs ADD COLUMN agent_id text, ADD COLUMN agent_version text, "
    "ADD COLUMN engine text, ADD COLUMN due_at bigint, "
    "ADD COLUMN waiting boolean NOT NULL DEFAULT false",
    # The new columns of the runs recorded so far, from their records.
    "UPDATE {s}.rt_runs SET agent_id = r->>'agent_id', agent_version = r->>'agent_version', "
    "engine = r->>'engine', waiting = (r->>'waiting_reason') IS NOT NULL, "
    "due_at = CASE state WHEN 'pending' THEN 0 "
    "WHEN 'retry_wait' THEN coalesce((r->>'next_attempt_at')::bigint, 0) "
    "WHEN 'running' THEN coalesce((r->>'lease_expires_at')::bigint, 0) "
    "WHEN 'cancelling' THEN coalesce((r->>'lease_expires_at')::bigint, 0) END "
    "FROM (SELECT run_id AS id, record::jsonb AS r FROM {s}.rt_runs) j WHERE run_id = j.id",
    "CREATE SEQUENCE {s}.rt_runs_seq OWNED BY {s}.rt_runs.seq",
    "SELECT setval('{s}.rt_runs_seq', coalesce((SELECT max(seq) FROM {s}.rt_runs), 0) + 1, false)",
    # A claim's: the claimable runs of one (agent, version) in submission order.
    f"CREATE INDEX rt_runs_claim ON {{s}}.rt_runs (agent_id, agent_version, kind, seq) "
    f"WHERE {_CLAIMABLE} AND {_EMBEDDED}",
    # An idle claim's: the eligible runs no claim has looked at yet (their
    # waiting reason is then written once, and they leave the index).
    f"CREATE INDEX rt_runs_unnoted ON {{s}}.rt_runs (kind, seq) "
    f"WHERE NOT waiting AND {_CLAIMABLE} AND {_EMBEDDED}",
    "CREATE TABLE {s}.rt_locks (key text PRIMARY KEY)",
)
"""Schema version 5: the claim's columns and indexes, the run sequence, ``rt_locks``.

``agent_id``, ``agent_version``, ``engine`` (from the record), ``due_at`` (when
the run is claimable: 0 when pending, ``next_attempt_at`` in ``retry_wait``,
``lease_expires_at`` while running; NULL otherwise) and ``waiting`` (a waiting
reason is recorded); ``rt_runs_seq`` numbers submissions; ``rt_locks`` holds
one row per session, request id and graph that a submission or a finish locks.
"""

WORK_STATES = frozenset({"pending", "retry_wait"})
"""States a write moves a run into that make it claimable (the work channel is notified)."""

_UNFINISHED = ", ".join(f"'{s}'" for s in sorted(UNFINISHED_STATES))
_COLUMNS = (
    "run_id, seq, session_id, state, request_id, fence, kind, graph_id, "
    "agent_id, agent_version, engine, due_at, waiting, record"
)
_UPDATED = ", ".join(
    f"{name} = EXCLUDED.{name}" for name in _COLUMNS.split(", ") if name != "run_id"
)
_CLAIM_CANDIDATES = 16  # runs a claim looks at, at most, before it gives up for this poll
_NOTE_BATCH = 1000  # unserved runs an idle claim gives their waiting reason, at most, per poll


@dataclass(frozen=True)
class _Statements:
    """Every runtime statement, for one schema."""

    lock_keys: str
    put: str
    submit_facts: str
    count_kind: str
    taken: str
    next_seqs: str
    graph: str
    graph_for_update: str
    get: str
    get_for_update: str
    renewable: str
    fence_for_share: str
    list_all: str
    list_states: str
    session_states: str
    session_head: str
    put_intent: str
    intents: str
    put_journal: str
    journaled: str
    announce: str
    forget: tuple[str, ...]
    forget_keys: str
    db_now: str


@functools.lru_cache(maxsize=64)
def _statements(schema: str) -> _Statements:
    # The store validated the name (_schema.quote_ident) before this runs.
    s = '"' + schema.replace('"', '""') + '"'
    sequence = "'" + f"{s}.rt_runs_seq".replace("'", "''") + "'"
    unfinished = f"state IN ({_UNFINISHED})"
    return _Statements(
        # ON CONFLICT DO UPDATE locks the row (new or not) until commit; keys
        # are sorted, so two writers locking several never deadlock.
        lock_keys=(
            f"INSERT INTO {s}.rt_locks (key) SELECT k FROM unnest(%s::text[]) AS k ORDER BY k "
            "ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key"
        ),
        put=(
            f"INSERT INTO {s}.rt_runs ({_COLUMNS}) VALUES ({', '.join(['%s'] * 14)}) "
            f"ON CONFLICT (run_id) DO UPDATE SET {_UPDATED}"
        ),
        # What a submission checks, in one round trip: the run a repeated
        # request id names, the unfinished count, whether the session is busy,
        # whether the run id is taken, the next seq.
        submit_facts=(
            f"SELECT (SELECT record FROM {s}.rt_runs WHERE request_id = %(request_id)s), "
            f"(SELECT count(*) FROM {s}.rt_runs WHERE kind = %(kind)s AND {unfinished}), "
            f"EXISTS (SELECT 1 FROM {s}.rt_runs WHERE session_id = %(session_id)s "
            f"AND {unfinished}), "
            f"EXISTS (SELECT 1 FROM {s}.rt_runs WHERE run_id = %(run_id)s), "
            f"nextval({sequence})"
        ),
        count_kind=f"SELECT count(*) FROM {s}.rt_runs WHERE kind = %s AND {unfinished}",
        taken=f"SELECT run_id FROM {s}.rt_runs WHERE run_id = ANY(%s) LIMIT 1",
        next_seqs=f"SELECT nextval({sequence}) FROM generate_series(1, %s)",
        graph=f"SELECT record FROM {s}.rt_runs WHERE graph_id = %s ORDER BY seq",
        graph_for_update=(
            f"SELECT record FROM {s}.rt_runs WHERE graph_id = %s ORDER BY seq FOR UPDATE"
        ),
        get=f"SELECT record FROM {s}.rt_runs WHERE run_id = %s",
        get_for_update=f"SELECT record FROM {s}.rt_runs WHERE run_id = %s FOR UPDATE",
        renewable=f"SELECT record FROM {s}.rt_runs WHERE run_id = %s AND fence = %s FOR UPDATE",
        fence_for_share=f"SELECT fence FROM {s}.rt_runs WHERE run_id = %s FOR SHARE",
        list_all=f"SELECT record FROM {s}.rt_runs ORDER BY seq",
        list_states=f"SELECT record FROM {s}.rt_runs WHERE state = ANY(%s) ORDER BY seq",
        session_states=(
            f"SELECT record FROM {s}.rt_runs WHERE session_id = %s AND state = ANY(%s) ORDER BY seq"
        ),
        session_head=(
            f"SELECT record FROM {s}.rt_runs WHERE session_id = %s AND {unfinished} "
            "ORDER BY seq LIMIT 1 FOR UPDATE"
        ),
        put_intent=(
            f"INSERT INTO {s}.rt_intents (run_id, tool_call_id, intent) VALUES (%s, %s, %s) "
            "ON CONFLICT (run_id, tool_call_id) DO UPDATE SET intent = EXCLUDED.intent"
        ),
        intents=f"SELECT intent FROM {s}.rt_intents WHERE run_id = %s",
        put_journal=(
            f"INSERT INTO {s}.rt_journal (run_id, step_index, response) VALUES (%s, %s, %s) "
            "ON CONFLICT (run_id, step_index) DO UPDATE SET response = EXCLUDED.response"
        ),
        journaled=f"SELECT response FROM {s}.rt_journal WHERE run_id = %s AND step_index = %s",
        # Sent at commit (payload: the run id on the event channel, the kind on the work one).
        announce="SELECT pg_notify(%s::text, %s::text)",
        forget=tuple(
            f"DELETE FROM {s}.{table} WHERE run_id = ANY(%s)"
            for table in ("rt_runs", "rt_intents", "rt_journal")
        ),
        # The lock rows of deleted runs' sessions and graphs no run is left in, and of
        # their request ids (one run each).
        forget_keys=(
            f"DELETE FROM {s}.rt_locks WHERE key IN ("
            f"SELECT 'session:' || g.session_id FROM {s}.rt_runs g "
            "WHERE g.run_id = ANY(%(ids)s) AND NOT EXISTS (SELECT 1 FROM "
            f"{s}.rt_runs o WHERE o.session_id = g.session_id AND o.run_id <> ALL(%(ids)s)) "
            f"UNION ALL SELECT 'graph:' || g.graph_id FROM {s}.rt_runs g "
            "WHERE g.run_id = ANY(%(ids)s) AND g.graph_id IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {s}.rt_runs o WHERE o.graph_id = g.graph_id "
            "AND o.run_id <> ALL(%(ids)s)) "
            f"UNION ALL SELECT 'request:' || g.request_id FROM {s}.rt_runs g "
            "WHERE g.run_id = ANY(%(ids)s) AND g.request_id IS NOT NULL)"
        ),
        # clock_timestamp(), not now(): the time of the call, not of the transaction.
        db_now="SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    )


@functools.lru_cache(maxsize=256)
def candidate_statement(schema: str, pairs: int) -> str:
    """A claim's candidate among ``pairs`` served ``(agent, version)`` pairs, locked.

    Of the oldest few eligible runs of each pair (one bounded range of
    ``rt_runs_claim`` each: the pairs are parameters the planner sees, not an
    array it cannot estimate), the oldest whose row no other transaction holds,
    locked ``FOR UPDATE SKIP LOCKED``: a locked row is skipped, never waited for.
    Parameters: ``a0, v0, a1, v1, ...``, ``kinds`` (``[kind]``), ``now``, ``skip``.
    """
    s = '"' + schema.replace('"', '""') + '"'
    unfinished = f"state IN ({_UNFINISHED})"
    branches = [
        f"(SELECT x.run_id, x.seq FROM {s}.rt_runs x "
        f"WHERE x.agent_id = %(a{i})s AND x.agent_version = %(v{i})s AND x.kind = ANY(%(kinds)s) "
        f"AND x.{_CLAIMABLE} AND (x.engine IS NULL OR x.engine = 'embedded') "
        "AND x.due_at <= %(now)s AND x.run_id <> ALL(%(skip)s::text[]) "
        # the oldest unfinished run of its session: a claim takes no other
        f"AND NOT EXISTS (SELECT 1 FROM {s}.rt_runs o WHERE o.session_id = x.session_id "
        f"AND o.{unfinished} AND o.seq < x.seq) "
        # (kind, seq): the order of rt_runs_claim's range, which no other index has
        f"ORDER BY x.kind, x.seq LIMIT {_CLAIM_CANDIDATES})"
        for i in range(pairs)
    ]
    return (
        f"SELECT record FROM {s}.rt_runs WHERE run_id IN ("
        f"SELECT c.run_id FROM ({' UNION ALL '.join(branches)}) c "
        f"ORDER BY c.seq LIMIT {_CLAIM_CANDIDATES}) "
        f"AND {_CLAIMABLE} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
    )


@functools.lru_cache(maxsize=256)
def unnoted_statement(schema: str, pairs: int) -> str:
    """An idle claim's look at eligible runs of other agents that no claim noted yet.

    Reads ``rt_runs_unnoted`` in order (a run leaves it once its waiting reason
    is written), at most a batch, locked ``FOR UPDATE SKIP LOCKED``. The kind
    comes as a one-element array, so ``(kind, seq)`` is an order only that index
    gives: the planner never walks every run in seq order instead, whatever its
    statistics say.
    Parameters as :func:`candidate_statement`'s.
    """
    s = '"' + schema.replace('"', '""') + '"'
    values = ", ".join(f"(%(a{i})s, %(v{i})s)" for i in range(pairs))
    others = f"AND (agent_id, agent_version) NOT IN (VALUES {values}) " if pairs else ""
    return (
        f"SELECT record FROM {s}.rt_runs WHERE NOT waiting AND kind = ANY(%(kinds)s) "
        f"AND {_CLAIMABLE} AND {_EMBEDDED} AND due_at <= %(now)s {others}"
        f"ORDER BY kind, seq LIMIT {_NOTE_BATCH} FOR UPDATE SKIP LOCKED"
    )


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
        self._rq = _statements(db.schema)

    def write(self, work: Callable[[Connection[tuple[Any, ...]]], T]) -> T:
        """``work`` in one transaction (again after a deadlock or serialization failure)."""

        def run(conn: Connection[tuple[Any, ...]]) -> T:
            with conn.transaction():
                return work(conn)

        return self._db.transact(run)

    def _rt_put(self, conn: Connection[tuple[Any, ...]], run: RuntimeRun) -> None:
        conn.execute(self._rq.put, _row(run))

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
            for _ in range(_CLAIM_CANDIDATES if pairs else 0):
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
