"""The runtime's tables in the SQLite store: run records, intents, the model journal.

A run record is kept whole as JSON (``record``), with the columns the scheduler
queries beside it. Every change of a run by its owner checks the fencing token
inside the same ``BEGIN IMMEDIATE`` transaction, so an owner that lost its lease
cannot write.
"""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, get_args

from ..._errors import (
    DurableConflictError,
    FencedOutError,
    LimitExceededError,
    RunNotFoundError,
    StoreCorruptionError,
)
from ..._gc import gc_paused
from ...durable.store import RunStore, admitted, check_commit, repeated_submission
from ...events._model import Event, NewEvent
from ...runs import (
    TERMINAL_STATES,
    UNFINISHED_STATES,
    RunKind,
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
from ._crc import row_crc, verify_row
from ._db import SqliteDb
from ._events import append_events
from ._heads import graph_nodes, read_head, update_graph, update_head
from ._run_rows import (
    RT_COLUMNS,
    decode_intent,
    queried_columns,
    remember,
    same_count,
    update_sql,
    verified_intents,
    verified_record,
)

__all__ = [
    "SqliteRunRecords",
    "check_fence",
    "migrate_runtime",
    "migrate_runtime_v4",
]

_UNFINISHED = ", ".join(f"'{s}'" for s in sorted(UNFINISHED_STATES))
# A record is read with every column of its row, to verify the row's checksum.
_RT = ", ".join(RT_COLUMNS)
_HEADS = f"""
SELECT {_RT} FROM rt_runs r
WHERE r.state IN ({_UNFINISHED})
  AND r.seq = (SELECT min(s.seq) FROM rt_runs s
               WHERE s.session_id = r.session_id AND s.state IN ({_UNFINISHED}))
ORDER BY r.seq
"""
# A new row in one statement; a row with the key already there is replaced by a second.
_INTENT_SQL = (
    "INSERT OR IGNORE INTO rt_intents (run_id, tool_call_id, intent, crc) VALUES (?, ?, ?, ?)"
)
_JOURNAL_SQL = (
    "INSERT OR IGNORE INTO rt_journal (run_id, step_index, response, crc) VALUES (?, ?, ?, ?)"
)
_REPLACE_INTENT = (
    "UPDATE rt_intents SET intent = ?3, crc = ?4 WHERE run_id = ?1 AND tool_call_id = ?2"
)
_REPLACE_JOURNAL = (
    "UPDATE rt_journal SET response = ?3, crc = ?4 WHERE run_id = ?1 AND step_index = ?2"
)
_KINDS = ", ".join(f"'{kind}'" for kind in get_args(RunKind))  # every kind: the index's whole range
_JOURNALED = "SELECT step_index, response, crc FROM rt_journal WHERE run_id = ?"
_PUT = f"INSERT OR REPLACE INTO rt_runs ({_RT}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_NAMED = 8
"""The columns of :data:`_RT` before ``record``: the run id, then what the scheduler queries."""


def migrate_runtime(db: Any) -> None:
    """Schema v3: rt_runs, rt_intents, rt_journal (idempotent)."""
    db.execute(
        """
        CREATE TABLE IF NOT EXISTS rt_runs (
            run_id TEXT PRIMARY KEY,
            seq INTEGER NOT NULL UNIQUE,
            session_id TEXT NOT NULL,
            state TEXT NOT NULL,
            request_id TEXT UNIQUE,
            fence INTEGER NOT NULL,
            record TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX IF NOT EXISTS rt_runs_session ON rt_runs (session_id, state, seq)")
    db.execute("CREATE INDEX IF NOT EXISTS rt_runs_state ON rt_runs (state, seq)")
    db.execute(
        """
        CREATE TABLE IF NOT EXISTS rt_intents (
            run_id TEXT NOT NULL,
            tool_call_id TEXT NOT NULL,
            intent TEXT NOT NULL,
            PRIMARY KEY (run_id, tool_call_id)
        ) WITHOUT ROWID
        """
    )
    db.execute(
        """
        CREATE TABLE IF NOT EXISTS rt_journal (
            run_id TEXT NOT NULL,
            step_index INTEGER NOT NULL,
            response TEXT NOT NULL,
            PRIMARY KEY (run_id, step_index)
        ) WITHOUT ROWID
        """
    )


def migrate_runtime_v4(db: Any) -> None:
    """Schema v4: ``kind`` and ``graph_id`` columns of rt_runs (tasks, graphs), idempotent."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(rt_runs)").fetchall()}
    if "kind" not in columns:
        db.execute("ALTER TABLE rt_runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'agent'")
    if "graph_id" not in columns:
        db.execute("ALTER TABLE rt_runs ADD COLUMN graph_id TEXT")
    db.execute("CREATE INDEX IF NOT EXISTS rt_runs_kind ON rt_runs (kind, state)")
    db.execute("CREATE INDEX IF NOT EXISTS rt_runs_graph ON rt_runs (graph_id, seq)")


def check_fence(run_id: str, current: int | None, fence: int) -> None:
    """Raise :class:`FencedOutError` unless ``current``, the run's token, is ``fence``.

    ``current`` None (no record of the run) passes: what the write needs of the
    record is the write's to check.
    """
    if current is not None and current != fence:
        raise FencedOutError(f"run {run_id!r} is owned by another runtime now")


def _put_intent(conn: sqlite3.Connection, intent: ToolIntent) -> int:
    """Write an intent; 1 when it is a new one (the run's head counts them), else 0."""
    row = (intent.run_id, intent.tool_call_id, intent.model_dump_json())
    # A completed intent completes the call's ``started`` row, there as a rule.
    completes = intent.state == "completed"
    values = (*row, row_crc("rt_intents", row))
    return _put_row(conn, _INTENT_SQL, _REPLACE_INTENT, values, likely_there=completes)


def _put_journal(conn: sqlite3.Connection, run_id: str, step_index: int, response: str) -> int:
    """Journal a response; 1 when the step had none (the run's head counts them), else 0."""
    row = (run_id, step_index, response)
    return _put_row(conn, _JOURNAL_SQL, _REPLACE_JOURNAL, (*row, row_crc("rt_journal", row)))


def _put_row(
    conn: sqlite3.Connection,
    insert: str,
    replace: str,
    values: tuple[Any, ...],
    *,
    likely_there: bool = False,
) -> int:
    """Insert the row or replace the one with its key; 1 when it is new, else 0.

    ``likely_there``: the row usually exists, so the replace is tried first (one
    statement where the usual case would take two).
    """
    if likely_there:
        if conn.execute(replace, values).rowcount == 1:
            return 0
        conn.execute(insert, values)
        return 1
    if conn.execute(insert, values).rowcount == 1:
        return 1
    conn.execute(replace, values)
    return 0


class SqliteRunRecords(RunStore):
    """The run-record part of :class:`~nbdurable.stores.sqlite.SqliteSessionStore`.

    Its methods do what :class:`~nbdurable.durable.store.RunStore` says.

    Args:
        db: The file's connection, shared with the store's other parts.
    """

    def __init__(self, db: SqliteDb) -> None:
        self._db = db

    def _put(
        self, conn: sqlite3.Connection, run: RuntimeRun, before: RuntimeRun | None = None
    ) -> None:
        """Write ``run``'s row; ``before``: the record this transaction read for it.

        With ``before``, the row is updated in place, only the columns that
        changed named: a runtime step writes its record twice, and replacing the
        row deleted and inserted it in each of rt_runs' eight b-trees, a dozen
        pages in the write-ahead log a commit instead of one (issue 42).
        """
        row = (run.run_id, *queried_columns(run), run.stored_json())  # as runtime_row, sooner
        values = (*row, row_crc("rt_runs", row))
        if before is not None and before.run_id == run.run_id:
            old = queried_columns(before)
            changed = tuple(i for i in range(1, _NAMED) if row[i] != old[i - 1])
            update = update_sql(changed)
            params = (*(row[i] for i in changed), row[-1], values[-1], run.run_id)
            if conn.execute(update, params).rowcount == 1:
                remember(values, run, before)
                return
        conn.execute(_PUT, values)
        remember(values, run, before)

    def rt_insert(
        self, run: RuntimeRun, *, enqueue: bool, max_pending: int
    ) -> tuple[RuntimeRun, bool]:
        with self._db.lock, self._db.write() as conn:
            if run.request_id is not None:
                found = conn.execute(
                    f"SELECT {_RT} FROM rt_runs WHERE request_id = ?", (run.request_id,)
                ).fetchone()
                if found is not None:
                    original = verified_record(found, self._db.legacy, 4, run.request_id)
                    return repeated_submission(original, run)

            def exists(query: str, *args: object) -> bool:
                return conn.execute(query, args).fetchone() is not None

            stored = admitted(
                run,
                seq=(conn.execute("SELECT max(seq) FROM rt_runs").fetchone()[0] or 0) + 1,
                pending=conn.execute(
                    f"SELECT count(*) FROM rt_runs WHERE kind = ? AND state IN ({_UNFINISHED})",
                    (run.kind,),
                ).fetchone()[0],
                max_pending=max_pending,
                busy=exists(
                    f"SELECT 1 FROM rt_runs WHERE session_id = ? AND state IN ({_UNFINISHED})",
                    run.session_id,
                ),
                enqueue=enqueue,
                taken=exists("SELECT 1 FROM rt_runs WHERE run_id = ?", run.run_id),
            )
            self._put(conn, stored)
            update_head(conn, run.run_id, record=True)
            if run.graph_id is not None:
                update_graph(conn, run.graph_id, 1)
            return stored, True

    def rt_insert_many(
        self, runs: Sequence[RuntimeRun], *, max_pending: int
    ) -> builtins.list[RuntimeRun]:
        with self._db.lock, self._db.write() as conn:
            pending = conn.execute(
                f"SELECT count(*) FROM rt_runs WHERE kind = 'agent' AND state IN ({_UNFINISHED})"
            ).fetchone()[0]
            if pending + len(runs) > max_pending:
                raise LimitExceededError("max_pending_runs", pending + len(runs), max_pending)
            seq = conn.execute("SELECT max(seq) FROM rt_runs").fetchone()[0] or 0
            stored = []
            for run in runs:
                if conn.execute("SELECT 1 FROM rt_runs WHERE run_id = ?", (run.run_id,)).fetchone():
                    raise DurableConflictError(f"run id {run.run_id!r} exists already")
                seq += 1
                stored.append(RunPatch(seq=seq).apply(run))
                self._put(conn, stored[-1])
                update_head(conn, run.run_id, record=True)
            for graph_id in {run.graph_id for run in runs if run.graph_id is not None}:
                update_graph(conn, graph_id, sum(run.graph_id == graph_id for run in runs))
            return stored

    def rt_graph(self, graph_id: str) -> builtins.list[RuntimeRun]:
        with self._db.lock, self._db.read():
            rows = self._db.conn.execute(
                f"SELECT {_RT} FROM rt_runs WHERE graph_id = ? ORDER BY seq", (graph_id,)
            ).fetchall()
            count = graph_nodes(self._db.conn, graph_id)
        if count is not None:
            same_count(len(rows), count, "graph (its head counts them)")
        elif rows and not self._db.legacy:
            raise StoreCorruptionError(f"the head row of graph {graph_id!r} is missing")
        return [verified_record(row, self._db.legacy, 7, graph_id) for row in rows]

    def rt_get(self, run_id: str) -> RuntimeRun | None:
        with self._db.lock, self._db.read():
            found = self._db.conn.execute(
                f"SELECT {_RT} FROM rt_runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            head = read_head(self._db.conn, run_id) if found is None else None
        if head is not None and head.record:
            raise StoreCorruptionError(
                f"the runtime record of run {run_id!r} cannot be read", run_id=run_id
            )
        return None if found is None else verified_record(found, self._db.legacy, 0, run_id)

    def rt_list(self, states: Sequence[str] | None = None) -> builtins.list[RuntimeRun]:
        with self._db.lock, self._db.read():
            if states is None:
                rows = self._db.conn.execute(f"SELECT {_RT} FROM rt_runs ORDER BY seq").fetchall()
            else:
                marks = ", ".join("?" * len(states))
                rows = self._db.conn.execute(
                    f"SELECT {_RT} FROM rt_runs INDEXED BY rt_runs_state "
                    f"WHERE state IN ({marks}) ORDER BY seq",
                    tuple(states),
                ).fetchall()
                # A second index counts them: an entry a damaged page or key
                # hides from one is a different count, not a shorter answer.
                (count,) = self._db.conn.execute(
                    f"SELECT count(*) FROM rt_runs INDEXED BY rt_runs_kind "
                    f"WHERE kind IN ({_KINDS}) AND state IN ({marks})",
                    tuple(states),
                ).fetchone()
                same_count(len(rows), count, "state")
        found = [verified_record(row, self._db.legacy) for row in rows]
        if states is not None and any(run.state not in states for run in found):
            raise StoreCorruptionError("an index of rt_runs leads to records of other states")
        return found

    def rt_session(self, session_id: str, states: Sequence[str]) -> builtins.list[RuntimeRun]:
        marks = ", ".join("?" * len(states))
        with self._db.lock, self._db.read():
            rows = self._db.conn.execute(
                f"SELECT {_RT} FROM rt_runs INDEXED BY rt_runs_session "
                f"WHERE session_id = ? AND state IN ({marks}) ORDER BY seq",
                (session_id, *states),
            ).fetchall()
            # Counted again through the state index (as rt_list does with two).
            (count,) = self._db.conn.execute(
                f"SELECT count(*) FROM rt_runs INDEXED BY rt_runs_state "
                f"WHERE state IN ({marks}) AND session_id = ?",
                (*states, session_id),
            ).fetchone()
            same_count(len(rows), count, "session")
            self._db.few_here(len(rows))  # many records to verify: on a store thread
        found = [verified_record(row, self._db.legacy, 2, session_id) for row in rows]
        if any(run.state not in states for run in found):
            raise StoreCorruptionError("an index of rt_runs leads to records of other states")
        return found

    def rt_update(self, run_id: str, patch: RunPatch, *, fence: int | None = None) -> RuntimeRun:
        with self._db.lock, self._db.write() as conn:
            current = self._locked_get(conn, run_id, fence)
            updated = patch.apply(current)
            self._put(conn, updated, current)
            if updated.state in TERMINAL_STATES and current.state not in TERMINAL_STATES:
                head = conn.execute(
                    f"SELECT {_RT} FROM rt_runs WHERE session_id = ? AND state IN ({_UNFINISHED}) "
                    "ORDER BY seq LIMIT 1",
                    (updated.session_id,),
                ).fetchone()
                rows = []
                if updated.graph_id is not None:
                    rows = conn.execute(
                        f"SELECT {_RT} FROM rt_runs WHERE graph_id = ? ORDER BY seq",
                        (updated.graph_id,),
                    ).fetchall()
                session_head = (
                    verified_record(head, self._db.legacy, 2, updated.session_id) if head else None
                )
                graph = [verified_record(row, self._db.legacy, 7, updated.graph_id) for row in rows]
                for run in after_finish(updated, session_head, graph):
                    self._put(conn, run)
            return updated

    def rt_change(
        self, run_id: str, rule: Callable[[RuntimeRun], RuntimeRun | None]
    ) -> tuple[RuntimeRun, bool]:
        """Apply ``rule`` to the record in one ``BEGIN IMMEDIATE`` (``RunStore.rt_change``)."""
        with self._db.lock, self._db.write() as conn:
            current = self._locked_get(conn, run_id)
            updated = rule(current)
            if updated is None:
                return current, False
            self._put(conn, updated, current)
            return updated, True

    def _locked_get(
        self, conn: sqlite3.Connection, run_id: str, fence: int | None = None
    ) -> RuntimeRun:
        """The run's record; with ``fence``, refused unless it is the run's token (one read)."""
        found = conn.execute(f"SELECT {_RT} FROM rt_runs WHERE run_id = ?", (run_id,)).fetchone()
        if found is None:
            raise RunNotFoundError(run_id)
        record = verified_record(found, self._db.legacy, 0, run_id)
        if fence is not None:
            check_fence(run_id, record.fence, fence)  # _put writes the column from the record
        return record

    def rt_claim(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        agents: Served,
        kind: str = "agent",
    ) -> RuntimeRun | None:
        """Take the next eligible run of ``kind`` (the oldest unfinished of its session)."""
        claimed = self.rt_claim_many(owner, now, lease_ms, agents, kind)
        return claimed[0] if claimed else None

    def rt_claim_many(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        agents: Served,
        kind: str = "agent",
        limit: int = 1,
    ) -> builtins.list[RuntimeRun]:
        """Up to ``limit`` eligible runs of ``kind``, taken in one transaction, in order.

        One transaction for a runtime's free slots: claimed one per
        transaction, each reading every unfinished session's head again, 200
        submitted runs took seconds to start (issue 42).
        """
        allowed = served(agents)
        with self._db.lock:
            # A look first, in a read: a runtime polls for work every poll_interval,
            # and a write transaction each time (for nothing, mostly) held the
            # file's write lock from every run's commits (issue 42).
            with self._db.read() as conn:
                heads = [verified_record(row, self._db.legacy) for row in conn.execute(_HEADS)]
            if not any(
                claimable(run, now, allowed, kind)
                or unclaimable_by_definition(run, now, allowed, kind) is not None
                for run in heads
            ):
                return []
        claimed: builtins.list[RuntimeRun] = []
        with self._db.lock, self._db.write() as conn:
            for row in conn.execute(_HEADS).fetchall():
                if len(claimed) >= limit:
                    break
                run = verified_record(row, self._db.legacy)
                if claimable(run, now, allowed, kind):
                    claimed.append(claim(run, owner, now, lease_ms))
                    self._put(conn, claimed[-1], run)
                elif (waiting := unclaimable_by_definition(run, now, allowed, kind)) is not None:
                    self._put(conn, waiting, run)  # once: the reason is then recorded
        return claimed

    def rt_renew(
        self, run_id: str, owner: str, fence: int, until: int, *, lease_ms: int | None = None
    ) -> bool:
        """Extend a held lease; False when it is not ours any more.

        ``lease_ms`` is not used: the store has no clock of its own, so ``until``
        (the caller's clock) holds.
        """
        with self._db.lock, self._db.write() as conn:
            found = conn.execute(
                f"SELECT {_RT} FROM rt_runs WHERE run_id = ? AND fence = ?", (run_id, fence)
            ).fetchone()
            if found is None:
                return False
            run = verified_record(found, self._db.legacy, 0, run_id)
            if run.lease_owner != owner:
                return False
            self._put(conn, RunPatch(lease_expires_at=until).apply(run), run)
            return True

    def rt_check_fence(
        self, run_id: str, fence: int, conn: sqlite3.Connection | None = None
    ) -> None:
        """Raise :class:`FencedOutError` unless ``fence`` is the run's current one."""
        found = (
            (conn or self._db.conn)
            .execute("SELECT fence FROM rt_runs WHERE run_id = ?", (run_id,))
            .fetchone()
        )
        check_fence(run_id, None if found is None else found[0], fence)

    def rt_intent(self, intent: ToolIntent, *, fence: int) -> None:
        with self._db.lock, self._db.write() as conn:
            self.rt_check_fence(intent.run_id, fence, conn)
            update_head(conn, intent.run_id, intents=_put_intent(conn, intent))

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
        """Several writes of a run's owner in one fenced transaction (``RunStore.rt_commit``)."""
        check_commit(changes)
        with self._db.lock, self._db.write() as conn:
            record = None
            if changes:
                current = self._locked_get(conn, run_id, fence)
                record = changes.apply(current)
                self._put(conn, record, current)
            else:
                self.rt_check_fence(run_id, fence, conn)
            added_journal = 0 if journal is None else _put_journal(conn, run_id, *journal)
            added_intents = {intent.run_id: 0 for intent in intents}
            for intent in intents:
                added_intents[intent.run_id] += _put_intent(conn, intent)
            own = added_intents.pop(run_id, 0)
            for other, count in added_intents.items():
                update_head(conn, other, intents=count)
            if events:  # the run's head is written once, with its events
                added = append_events(conn, run_id, events, intents=own, journal=added_journal)
            else:
                added = []
                if own or added_journal:
                    update_head(conn, run_id, intents=own, journal=added_journal)
        return added, record

    def rt_intents(self, run_id: str) -> builtins.list[ToolIntent]:
        with gc_paused():  # thousands of rows for a long run: no collector pass meanwhile
            return self._intents(run_id)

    def _intents(self, run_id: str) -> builtins.list[ToolIntent]:
        with self._db.lock, self._db.read():
            rows = self._db.conn.execute(
                "SELECT tool_call_id, intent, crc FROM rt_intents WHERE run_id = ?", (run_id,)
            ).fetchall()
            head = read_head(self._db.conn, run_id)
        legacy = self._db.legacy
        for call, text, crc in rows:
            row = (run_id, call, text)
            # Checked inline, the error built only for a damaged row.
            if (crc is not None or not legacy) and (
                type(crc) is not int or crc != row_crc("rt_intents", row)
            ):
                verify_row("rt_intents", row, crc, run_id, f"tool intent {call!r}", legacy)
        if head is None and rows and not legacy:
            raise StoreCorruptionError(f"the head row of run {run_id!r} is missing", run_id=run_id)
        if head is not None and len(rows) != head.intents:
            raise head.short(run_id, "tool intents", len(rows), head.intents)
        texts = [text for _, text, _ in rows]
        # Every row with a checksum was verified just above (a legacy row may have none).
        if all(crc is not None for _, _, crc in rows) and (found := verified_intents(texts)):
            return found
        return [decode_intent(text) for text in texts]

    def rt_journal(self, run_id: str, step_index: int, response: str, *, fence: int) -> None:
        with self._db.lock, self._db.write() as conn:
            self.rt_check_fence(run_id, fence, conn)
            update_head(conn, run_id, journal=_put_journal(conn, run_id, step_index, response))

    def rt_journaled(self, run_id: str, step_index: int) -> str | None:
        with self._db.lock, self._db.read():
            found = self._db.conn.execute(
                "SELECT response, crc FROM rt_journal WHERE run_id = ? AND step_index = ?",
                (run_id, step_index),
            ).fetchone()
            if found is None:
                # Not journaled, or a row a damaged page hides: the head counts them.
                head = read_head(self._db.conn, run_id)
                if head is not None and head.journal:
                    # Every one of them, verified: a damaged step number hides its row.
                    rows = self._db.conn.execute(_JOURNALED, (run_id,)).fetchall()
                    legacy = self._db.legacy
                    for step, text, crc in rows:
                        row = (run_id, step, text)
                        # Checked inline, the error built only for a damaged row.
                        if crc is None and legacy:
                            continue
                        if type(crc) is not int or crc != row_crc("rt_journal", row):
                            what = f"the journaled response of step {step}"
                            verify_row("rt_journal", row, crc, run_id, what, legacy)
                    if len(rows) != head.journal:
                        raise head.short(run_id, "journaled responses", len(rows), head.journal)
                    # A row the exact lookup missed (a damaged key) that verifies as this step's.
                    found = next(((t, c) for s, t, c in rows if s == step_index), None)
                if found is None:
                    return None
        what = f"the journaled response of step {step_index}"
        row = (run_id, step_index, found[0])
        verify_row("rt_journal", row, found[1], run_id, what, self._db.legacy)
        return str(found[0])

    def forget(self, conn: sqlite3.Connection, run_id: str) -> None:
        graph = conn.execute("SELECT graph_id FROM rt_runs WHERE run_id = ?", (run_id,)).fetchone()
        for table in ("rt_runs", "rt_intents", "rt_journal"):
            conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        if graph is not None and isinstance(graph[0], str):
            update_graph(conn, graph[0], -1)
