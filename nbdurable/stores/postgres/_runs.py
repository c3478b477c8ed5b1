"""The runtime's tables in the PostgreSQL store: run records, intents, the model journal.

The same layout as the SQLite store's (:mod:`..sqlite._runs`): a run record is
kept whole as JSON text (``record``), with the columns the scheduler queries
beside it. Schema version 3 adds the tables (:data:`RUNTIME_MIGRATION`).

Several processes may share the tables, so:

- every write that rewrites a run record (submit, update, claim, renew) holds a
  transaction-level advisory lock of the store's schema: submissions, claims and
  the promotion of a session's next run see one order, as under SQLite's
  ``BEGIN IMMEDIATE`` (a claim takes the oldest unfinished run of its session,
  and only one claim takes it);
- a fenced write (a tool intent, a journaled response, an event append or a
  checkpoint of a runtime run) reads the run's fence ``FOR SHARE`` in its own
  transaction: a claim that bumps the fence waits for it to commit, and a write
  that comes after the claim sees the new fence and is refused.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
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

__all__ = ["RUNTIME_MIGRATION", "RUNTIME_MIGRATION_V4", "PostgresRunRecords"]

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

_UNFINISHED = ", ".join(f"'{s}'" for s in sorted(UNFINISHED_STATES))
_COLUMNS = "run_id, seq, session_id, state, request_id, fence, kind, graph_id, record"


@dataclass(frozen=True)
class _Statements:
    """Every runtime statement, for one schema."""

    lock: str
    put: str
    submit_facts: str
    count_kind: str
    taken: str
    last_seq: str
    graph: str
    get: str
    get_for_update: str
    renewable: str
    fence_for_share: str
    list_all: str
    list_states: str
    session_states: str
    session_head: str
    heads: str
    put_intent: str
    intents: str
    put_journal: str
    journaled: str
    announce: str
    forget: tuple[str, ...]
    db_now: str


@functools.lru_cache(maxsize=64)
def _statements(schema: str) -> _Statements:
    # The store validated the name (_schema.quote_ident) before this runs.
    s = '"' + schema.replace('"', '""') + '"'
    unfinished = f"state IN ({_UNFINISHED})"
    return _Statements(
        lock="SELECT pg_advisory_xact_lock(%s)",
        put=(
            f"INSERT INTO {s}.rt_runs ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (run_id) DO UPDATE SET seq = EXCLUDED.seq, "
            "session_id = EXCLUDED.session_id, state = EXCLUDED.state, "
            "request_id = EXCLUDED.request_id, fence = EXCLUDED.fence, kind = EXCLUDED.kind, "
            "graph_id = EXCLUDED.graph_id, record = EXCLUDED.record"
        ),
        # What a submission checks, in one round trip: the run a repeated
        # request id names, the unfinished count, whether the session is busy,
        # whether the run id is taken, the last seq.
        submit_facts=(
            f"SELECT (SELECT record FROM {s}.rt_runs WHERE request_id = %(request_id)s), "
            f"(SELECT count(*) FROM {s}.rt_runs WHERE kind = %(kind)s AND {unfinished}), "
            f"EXISTS (SELECT 1 FROM {s}.rt_runs WHERE session_id = %(session_id)s "
            f"AND {unfinished}), "
            f"EXISTS (SELECT 1 FROM {s}.rt_runs WHERE run_id = %(run_id)s), "
            f"(SELECT coalesce(max(seq), 0) FROM {s}.rt_runs)"
        ),
        count_kind=f"SELECT count(*) FROM {s}.rt_runs WHERE kind = %s AND {unfinished}",
        taken=f"SELECT run_id FROM {s}.rt_runs WHERE run_id = ANY(%s) LIMIT 1",
        last_seq=f"SELECT coalesce(max(seq), 0) FROM {s}.rt_runs",
        graph=f"SELECT record FROM {s}.rt_runs WHERE graph_id = %s ORDER BY seq",
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
            "ORDER BY seq LIMIT 1"
        ),
        # The oldest unfinished run of every session, in submission order.
        heads=(
            f"SELECT record FROM (SELECT DISTINCT ON (session_id) seq, record "
            f"FROM {s}.rt_runs WHERE {unfinished} ORDER BY session_id, seq) h ORDER BY seq"
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
        # Sent at commit, on the channel event appends notify (payload: the run id).
        announce="SELECT pg_notify(%s::text, %s::text)",
        forget=tuple(
            f"DELETE FROM {s}.{table} WHERE run_id = %s"
            for table in ("rt_runs", "rt_intents", "rt_journal")
        ),
        # clock_timestamp(), not now(): a claim may wait for the advisory lock
        # after its transaction began.
        db_now="SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    )


def _runtime_key(schema: str) -> int:
    """The advisory lock key of the runtime's writes on ``schema`` (signed 64-bit)."""
    digest = hashlib.sha256(f"nbdurable:runtime:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _record(text: str) -> RuntimeRun:
    return validate_stored(RuntimeRun, text)


class PostgresRunRecords(RunStore):
    """The run-record part of :class:`~nbdurable.stores.postgres.PostgresSessionStore`.

    Its methods do what :class:`~nbdurable.durable.store.RunStore` says.

    Args:
        db: The schema's connection, shared with the store's other parts.
    """

    def __init__(self, db: PostgresDb) -> None:
        self._db = db
        self._rq = _statements(db.schema)
        self._key = _runtime_key(db.schema)

    def write(self, work: Callable[[Connection[tuple[Any, ...]]], T], exclusive: bool) -> T:
        """``work`` in one transaction; ``exclusive``: under the schema's runtime advisory lock."""

        def run(conn: Connection[tuple[Any, ...]]) -> T:
            with conn.transaction():
                if exclusive:
                    conn.execute(self._rq.lock, (self._key,))
                return work(conn)

        return self._db.transact(run)

    def _rt_put(self, conn: Connection[tuple[Any, ...]], run: RuntimeRun) -> None:
        conn.execute(self._rq.put, runtime_row(run))

    def rt_insert(
        self, run: RuntimeRun, *, enqueue: bool, max_pending: int
    ) -> tuple[RuntimeRun, bool]:

        def insert(conn: Connection[tuple[Any, ...]]) -> tuple[RuntimeRun, bool]:
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
            found, pending, busy, taken, last_seq = facts
            if run.request_id is not None and found is not None:
                return repeated_submission(_record(found), run)
            stored = admitted(
                run,
                seq=int(last_seq) + 1,
                pending=pending,
                max_pending=max_pending,
                busy=busy,
                enqueue=enqueue,
                taken=taken,
            )
            self._rt_put(conn, stored)
            return stored, True

        return self.write(insert, exclusive=True)

    def rt_insert_many(
        self, runs: Sequence[RuntimeRun], *, max_pending: int
    ) -> builtins.list[RuntimeRun]:

        def insert(conn: Connection[tuple[Any, ...]]) -> builtins.list[RuntimeRun]:
            found = conn.execute(self._rq.count_kind, ("agent",)).fetchone()
            pending = int(found[0]) if found is not None else 0
            if pending + len(runs) > max_pending:
                raise LimitExceededError("max_pending_runs", pending + len(runs), max_pending)
            taken = conn.execute(self._rq.taken, ([run.run_id for run in runs],)).fetchone()
            if taken is not None:
                raise DurableConflictError(f"run id {taken[0]!r} exists already")
            last = conn.execute(self._rq.last_seq).fetchone()
            seq = int(last[0]) if last is not None else 0
            stored = []
            for run in runs:
                seq += 1
                stored.append(RunPatch(seq=seq).apply(run))
                self._rt_put(conn, stored[-1])
            return stored

        return self.write(insert, exclusive=True)

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
            if updated.state in TERMINAL_STATES and current.state not in TERMINAL_STATES:
                head = conn.execute(self._rq.session_head, (updated.session_id,)).fetchone()
                rows = []
                if updated.graph_id is not None:
                    rows = conn.execute(self._rq.graph, (updated.graph_id,)).fetchall()
                session_head = _record(head[0]) if head is not None else None
                graph = [_record(text) for (text,) in rows]
                for run in after_finish(updated, session_head, graph):
                    self._rt_put(conn, run)
            if updated.state != current.state:
                # A state change's events are appended before its record: this
                # notification tells other processes' record mirrors to read it again.
                notice = run_id if len(run_id.encode()) < 8000 else ""
                conn.execute(self._rq.announce, (self._db.notify_channel, notice))
            return updated

        return self.write(update, exclusive=True)

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
            return updated, True

        return self.write(change, exclusive=True)

    def rt_claim(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        agents: Served,
        kind: str = "agent",
    ) -> RuntimeRun | None:
        """Take the next eligible run of ``kind`` (the oldest unfinished of its session)."""
        allowed = served(agents)

        def take(conn: Connection[tuple[Any, ...]]) -> RuntimeRun | None:
            # Leases are judged and set by the database's clock, not the caller's
            # ``now``: hosts whose clocks disagree still agree on expiry.
            db_now = self._rt_db_now(conn)
            for (text,) in conn.execute(self._rq.heads).fetchall():
                run = _record(text)
                if claimable(run, db_now if run.state in ACTIVE_STATES else now, allowed, kind):
                    claimed = claim(run, owner, now, lease_ms)
                    claimed = RunPatch(lease_expires_at=db_now + lease_ms).apply(claimed)
                    self._rt_put(conn, claimed)
                    return claimed
                if (waiting := unclaimable_by_definition(run, now, allowed, kind)) is not None:
                    self._rt_put(conn, waiting)  # once: the reason is then recorded
            return None

        return self.write(take, exclusive=True)

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

        return self.write(renew, exclusive=True)

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

        self.write(write, exclusive=False)

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

        self.write(write, exclusive=False)

    def rt_journaled(self, run_id: str, step_index: int) -> str | None:
        with self._db.pool.connection() as conn:
            found = conn.execute(self._rq.journaled, (run_id, step_index)).fetchone()
        return None if found is None else str(found[0])

    def forget(self, conn: Connection[tuple[Any, ...]], run_id: str) -> None:
        for statement in self._rq.forget:
            conn.execute(statement, (run_id,))
