"""The embedded default store: one SQLite file, full history, linear storage.

Messages are stored once, as a content-addressed chain (see :mod:`..chain`); a
checkpoint row holds only metadata and the id of its last message node. A save
writes the nodes it adds plus one row, in one ``BEGIN IMMEDIATE`` transaction,
so its cost does not grow with the history. The schema lives in
:mod:`._schema`.
"""

from __future__ import annotations

import builtins
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..._errors import RunNotFoundError, StoreCorruptionError
from ...durable._checkpoint import AgentCheckpoint, CheckpointInfo
from ...durable._records import RunRecord
from ...durable.store import Capability, EventLog, HistoryStore, RunStore
from ...events._model import Event, NewEvent
from ...messages import Message
from .._chain import (
    Chain,
    ChainCache,
    NodeRow,
    decode_messages,
    extend_chain,
    known_prefix,
    verify_chain,
)
from .._packing import unpack_json
from .._rows import COLUMNS, CheckpointRow, checkpoint_row, run_record
from ._crc import latest_row, pick_at_step, row_crc, verify_checkpoint, verify_run
from ._errors import guard_methods, typed_error
from ._events import (
    KNOWN_RUN,
    LAST_EVENT_SUBQUERY,
    append_events,
    decode_events,
    delete_events,
    fetch_events,
)
from ._nowait import SqliteNowaitWrites
from ._rows import checkpoint_values, node_rows
from ._runs import SqliteRuntimeTables, check_fence
from ._schema import SCHEMA_VERSION, legacy_rows, migrate, verify_schema

__all__ = ["SqliteSessionStore"]

T = TypeVar("T")

_META = ", ".join(f"c.{name}" for name in COLUMNS)
_INSERT_NODE = "INSERT OR IGNORE INTO nodes (id, parent, message) VALUES (?, ?, ?)"
# What a save reads before it writes, in one statement: the run's last
# checkpoint number, whether the parent node is still there, the last event.
_SAVE_STATE = (
    "SELECT r.last_seq, "
    "EXISTS (SELECT 1 FROM nodes WHERE id = ?2), "
    f"{LAST_EVENT_SUBQUERY}, "
    "(SELECT fence FROM rt_runs WHERE run_id = ?1), "  # what a runtime owner's save checks
    "r.created_at, r.updated_at, r.crc "  # the run row, verified before it is sealed anew
    "FROM (SELECT 1) LEFT JOIN runs r ON r.run_id = ?1"
)
_RUN_ROW = "SELECT created_at, updated_at, last_seq, crc FROM runs WHERE run_id = ?"
_UPDATE_RUN = "UPDATE runs SET last_seq = ?, updated_at = ?, crc = ? WHERE run_id = ?"
_INSERT_RUN = (
    "INSERT INTO runs (run_id, created_at, updated_at, last_seq, crc) VALUES (?1, ?2, ?2, ?3, ?4)"
)
_INSERT_CHECKPOINT = (
    f"INSERT INTO checkpoints (run_id, seq, head, {', '.join(COLUMNS)}, crc) "
    f"VALUES ({', '.join('?' * (len(COLUMNS) + 4))})"
)
# Every read of a checkpoint row takes its run's row too (LEFT JOIN: a run row
# without its checkpoint is damage, not "no checkpoint"), and both checksums.
_RUN_COLUMNS = "r.created_at, r.updated_at, r.last_seq, r.crc"
_LATEST = (
    f"SELECT c.seq, c.head, {_META}, c.crc, {_RUN_COLUMNS} FROM runs r "
    "LEFT JOIN checkpoints c ON c.run_id = r.run_id AND c.seq = r.last_seq WHERE r.run_id = ?"
)
_HISTORY = (
    f"SELECT c.seq, c.head, {_META}, c.crc FROM checkpoints c WHERE c.run_id = ? ORDER BY c.seq"
)
_RUNS = (
    f"SELECT r.run_id, c.seq, c.head, {_META}, c.crc, {_RUN_COLUMNS} FROM runs r "
    "LEFT JOIN checkpoints c ON c.run_id = r.run_id AND c.seq = r.last_seq ORDER BY r.id"
)
_AT_STEP = "SELECT seq FROM checkpoints WHERE run_id = ? AND step_index = ?"
_ORPHANS = "SELECT EXISTS (SELECT 1 FROM checkpoints WHERE run_id = ?)"
# One query walks the chain from the head up to the root; the depth bound stops
# a corrupt cycle, and verify_chain notices a chain that is too short or too long.
_CHAIN = """
WITH RECURSIVE chain(id, parent, message, depth) AS (
    SELECT id, parent, message, 1 FROM nodes WHERE id = ?
    UNION ALL
    SELECT n.id, n.parent, n.message, chain.depth + 1
    FROM nodes n JOIN chain ON n.id = chain.parent
    WHERE chain.depth < ?
)
SELECT id, parent, message FROM chain
"""
# Deleting a run: collect its nodes, drop its rows, then delete the collected
# nodes except those another checkpoint still reaches (a head of another run,
# or the parent of a node outside the set, and all their ancestors).
_GC_COLLECT = """
INSERT INTO temp.nbdurable_gc (id)
WITH RECURSIVE mine(id) AS (
    SELECT head FROM checkpoints WHERE run_id = ? AND head IS NOT NULL
    UNION
    SELECT n.parent FROM nodes n JOIN mine ON n.id = mine.id WHERE n.parent IS NOT NULL
)
SELECT id FROM mine
"""
_GC_SWEEP = """
WITH RECURSIVE keep(id) AS (
    SELECT g.id FROM temp.nbdurable_gc g
    WHERE EXISTS (SELECT 1 FROM checkpoints c WHERE c.head = g.id)
       OR EXISTS (SELECT 1 FROM nodes n WHERE n.parent = g.id
                  AND n.id NOT IN (SELECT id FROM temp.nbdurable_gc))
    UNION
    SELECT n.parent FROM nodes n JOIN keep ON n.id = keep.id WHERE n.parent IS NOT NULL
)
DELETE FROM nodes
WHERE id IN (SELECT id FROM temp.nbdurable_gc) AND id NOT IN (SELECT id FROM keep)
"""

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_PAGE_SIZE = 2048


class SqliteSessionStore(SqliteRuntimeTables, SqliteNowaitWrites, HistoryStore, RunStore, EventLog):
    """Checkpoints in one SQLite file: every checkpoint kept, only what is new written.

    Several processes may write different runs to the same file: WAL mode, a
    busy timeout and ``BEGIN IMMEDIATE`` transactions make writers queue instead
    of failing with "database is locked". Within a process the store is
    thread-safe (one connection behind a lock). The schema is migrated on open.

    Args:
        path: The database file (created with its directory when missing), or
            ``":memory:"`` for a private in-memory database.
        busy_timeout: Seconds a writer waits for another process's transaction.
        synchronous: SQLite's ``synchronous`` setting. ``"NORMAL"`` (the
            default) keeps every committed checkpoint across a process crash or
            SIGKILL; ``"FULL"`` also across a power loss, at one fsync per save.

    Every method raises :class:`~nbdurable.StoreCorruptionError` for a damaged
    file (naming it, and ``nbdurable store check``) and
    :class:`~nbdurable.StoreWriteError` for a write the disk refused (full,
    read-only): SQLite's own exceptions never reach the caller for those.

    Raises:
        CheckpointVersionError: The file's schema is newer than this nbdurable.
        StoreCorruptionError: The file is not an SQLite database, or is damaged.
        StoreWriteError: A new or older file cannot be written (read-only, full).
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.HISTORY,
            Capability.PERSISTENT,
            Capability.INCREMENTAL,
            Capability.MULTIPROCESS,
            Capability.VERSIONED_SCHEMA,
            Capability.EVENTS,
            Capability.RUNTIME,
            Capability.COMMIT,
        }
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        synchronous: str = "NORMAL",
    ) -> None:
        if synchronous.upper() not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, not {synchronous!r}")
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        # Read at every save by the event writer: resolve the path once.
        self._channel = None if self.path == ":memory:" else os.path.realpath(self.path)
        self._busy_timeout = busy_timeout
        self._init_nowait(self._channel is not None, synchronous.upper())
        self._lock = threading.RLock()
        self._chains = ChainCache()
        self._conn = sqlite3.connect(
            self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            # A new file gets 2 KB pages (an existing one keeps its own): a step's
            # rows touch a dozen pages, and every commit copies each whole page
            # into the write-ahead log, then a checkpoint copies it again.
            self._conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
            # Switching a new file to WAL takes a lock the busy handler does not
            # always wait for, so several processes opening one new file retry.
            self._retry_locked(lambda: self._conn.execute("PRAGMA journal_mode = WAL").fetchone())
            self._conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            # After a checkpoint the WAL is cut back to this size instead of staying
            # at its high-water mark (SQLite's default keeps ~4 MB around forever).
            self._conn.execute("PRAGMA journal_size_limit = 262144")
            # WAL checkpoints never run inside a commit (see SqliteNowaitWrites._checkpoint_wal).
            self._conn.execute("PRAGMA wal_autocheckpoint = 0")
            self._retry_locked(lambda: migrate(self._conn, self.path))
            verify_schema(self._conn, self.path)
            self._legacy = legacy_rows(self._conn, self.path)
            if self.local_nonblocking_writes:
                self._nowait_conn = self._open_nowait_connection()
        except BaseException as exc:
            self._conn.close()
            known = isinstance(exc, (sqlite3.Error, UnicodeDecodeError))
            typed = typed_error(exc, self.path) if known and isinstance(exc, Exception) else None
            if typed is not None:
                raise typed from exc
            raise

    @property
    def schema_version(self) -> int:
        """The schema version this store writes (the file's, after migrations)."""
        return SCHEMA_VERSION

    @property
    def location(self) -> Path | None:
        """The database file (None for ``:memory:``)."""
        return None if self.path == ":memory:" else Path(self.path)

    @property
    def event_channel(self) -> str | None:
        """Identifies this file's event log for in-process subscribers (None for ``:memory:``)."""
        return self._channel

    @property
    def saves_extensions(self) -> bool:
        """``save`` and ``save_with_events`` take ``extends`` (see :meth:`save`)."""
        return True

    def save(
        self, checkpoint: AgentCheckpoint, *, extends: Sequence[Message] | None = None
    ) -> None:
        """Store a checkpoint in one transaction: its new message nodes and one row.

        Args:
            checkpoint: What to save.
            extends: Optional promise that ``checkpoint.messages`` begins with the
                very message objects of this history (the one saved last): the
                store then writes the tail without comparing the whole history.
        """
        self._save(checkpoint, (), extends=extends)

    def save_with_events(
        self,
        checkpoint: AgentCheckpoint,
        events: Sequence[NewEvent],
        *,
        fence: int | None = None,
        extends: Sequence[Message] | None = None,
    ) -> Sequence[Event]:
        """Store a checkpoint and append events to its run's log in one transaction.

        With ``fence`` (a runtime owner's token) the write is refused with
        :class:`~nbdurable.FencedOutError` when the run has another owner now;
        ``extends`` is as in :meth:`save`.
        """
        return self._save(checkpoint, events, fence, extends=extends)

    def append_events(
        self, run_id: str, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> Sequence[Event]:
        """Append events in one transaction; offsets continue from the run's last one."""
        if not events:
            return []
        with self._lock, self._write() as conn:
            if fence is not None:
                self.rt_check_fence(run_id, fence, conn)
            return append_events(conn, run_id, events)

    def read_events(
        self, run_id: str, after: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        """Events with offset > ``after``, in order.

        Raises:
            RunNotFoundError: The file has no checkpoint and no event of the run.
            StoreCorruptionError: An event's payload is not JSON.
        """
        with self._lock, self._read() as conn:
            rows = fetch_events(conn, run_id, after, limit)
            unknown = not rows.legacy and not rows.batches and rows.last == 0 and not rows.head
            if unknown and not conn.execute(KNOWN_RUN, (run_id,)).fetchone()[0]:
                raise RunNotFoundError(run_id)
        return decode_events(run_id, after, limit, rows, self._legacy)

    def _save(
        self,
        checkpoint: AgentCheckpoint,
        events: Sequence[NewEvent],
        fence: int | None = None,
        *,
        extends: Sequence[Message] | None = None,
    ) -> Sequence[Event]:
        run_id = checkpoint.run_id
        messages = checkpoint.messages
        row = checkpoint_row(checkpoint)
        with self._lock:
            cached = self._chains.get(run_id)
            known = known_prefix(cached, messages, extends)
            parent = cached.ids[known - 1] if cached is not None and known else None
            new_ids, new_rows = extend_chain(parent, messages[known:])
            head = new_ids[-1] if new_ids else parent
            with self._write() as conn:
                last_seq, has_parent, last_event, owner, created, updated, run_crc = conn.execute(
                    _SAVE_STATE, (run_id, parent)
                ).fetchone()
                if last_seq is not None:  # a damaged row is refused, not given a valid checksum
                    verify_run(run_id, (created, updated, last_seq, run_crc), self._legacy)
                if fence is not None:
                    check_fence(run_id, owner, fence)
                if parent is not None and not has_parent:
                    # Another process deleted the nodes this process remembered.
                    _, new_rows = extend_chain(None, messages)
                conn.executemany(_INSERT_NODE, node_rows(new_rows))
                seq = (last_seq or 0) + 1
                values = checkpoint_values(row)
                crc = row_crc("checkpoints", (run_id, seq, head, *values))
                conn.execute(_INSERT_CHECKPOINT, (run_id, seq, head, *values, crc))
                at = checkpoint.created_at
                if last_seq is not None:
                    crc = row_crc("runs", (run_id, created, at, seq))
                    conn.execute(_UPDATE_RUN, (seq, at, crc, run_id))
                else:
                    conn.execute(
                        _INSERT_RUN, (run_id, at, seq, row_crc("runs", (run_id, at, at, seq)))
                    )
                added = append_events(conn, run_id, events, last_event or 0) if events else []
            chain = cached.grown(known, messages, new_ids) if cached is not None else None
            self._chains.put(run_id, chain or Chain(messages, new_ids))
            if checkpoint.status != "running":
                # A run that stops or ends folds the write-ahead log back into the file
                # (PASSIVE: never waits for readers), so an idle store stays small.
                self._checkpoint_wal(force=True)
        return added

    def load(self, run_id: str, step_index: int | None = None) -> AgentCheckpoint | None:
        """Return the latest checkpoint, or the latest one saved at ``step_index``.

        Raises:
            StoreCorruptionError: The checkpoint's data is damaged (names the run and step).
            CheckpointVersionError: The checkpoint was written with a newer version.
        """
        with self._lock, self._read() as conn:
            if step_index is None:
                found = self._latest(conn, run_id)
            else:
                # Every checkpoint row of the run, numbered without a hole (a row
                # a damaged index or page hides is an error), and the step index's
                # own answer: see pick_at_step.
                rows = self._checkpoints(conn, run_id, verify=False)
                indexed = conn.execute(_AT_STEP, (run_id, step_index)).fetchall()
                found = pick_at_step(
                    run_id, rows, [s for (s,) in indexed], step_index, self._legacy
                )
            if found is None:
                return None
            head: bytes | None = found[1]
            row = CheckpointRow.from_values(run_id, found[2 : 2 + len(COLUMNS)])
            messages = self._cached_messages(run_id, head, row.message_count)
            if messages is None:
                nodes = self._read_chain(conn, head, row)
                messages = decode_messages(
                    [text for _, _, text in nodes],
                    run_id=run_id,
                    step_index=row.step_index,
                    verified=True,  # _read_chain checked every node's hash
                )
                self._chains.put(run_id, Chain(messages, [nid for nid, _, _ in nodes]))
        return row.checkpoint(messages)

    def history(self, run_id: str) -> builtins.list[CheckpointInfo]:
        """Metadata of every checkpoint of a run in save order; reads no message."""
        with self._lock, self._read() as conn:
            found = self._checkpoints(conn, run_id)
        end = 2 + len(COLUMNS)
        return [CheckpointRow.from_values(run_id, values[2:end]).info() for values in found]

    def list(self) -> builtins.list[str]:
        """Run ids, oldest run first."""
        with self._lock:
            found = self._conn.execute(
                "SELECT run_id, created_at, updated_at, last_seq, crc FROM runs ORDER BY id"
            ).fetchall()
        for run_id, *rest in found:
            verify_run(str(run_id), rest, self._legacy)
        return [run_id for (run_id, *_) in found]

    def list_runs(self) -> builtins.list[RunRecord]:
        """One record per run (its latest checkpoint's metadata), oldest run first."""
        with self._lock:
            found = self._conn.execute(_RUNS).fetchall()
        records = []
        for run_id, *values in found:
            row = latest_row(str(run_id), values, self._legacy)
            created = row[-4]
            records.append(run_record(run_id, row[0], created, row[2 : 2 + len(COLUMNS)]))
        return records

    def _latest(self, conn: sqlite3.Connection, run_id: str) -> Sequence[Any] | None:
        """The run's latest checkpoint row, verified, with its run row's; None without a run."""
        found = conn.execute(_LATEST, (run_id,)).fetchone()
        if found is None:
            if conn.execute(_ORPHANS, (run_id,)).fetchone()[0]:
                raise StoreCorruptionError(
                    f"the run row of run {run_id!r} cannot be read", run_id=run_id
                )
            return None
        return latest_row(run_id, found, self._legacy)

    def _checkpoints(
        self, conn: sqlite3.Connection, run_id: str, *, verify: bool = True
    ) -> builtins.list[tuple[Any, ...]]:
        """Every checkpoint row of a run in save order: ``(seq, head, *columns, crc)``.

        Numbered 1..last_seq (the run row verified); each row verified unless not ``verify``.
        """
        found = conn.execute(_HISTORY, (run_id,)).fetchall()
        run = conn.execute(_RUN_ROW, (run_id,)).fetchone()
        if run is not None:
            verify_run(run_id, run, self._legacy)
        # Saves are numbered 1..last_seq: anything else is rows a damaged page hides.
        # (compared without building 1..last_seq: a damaged last_seq can be huge)
        last = run[2] if run else 0
        if len(found) != last or any(v[0] != i for i, v in enumerate(found, 1)):
            raise StoreCorruptionError(
                f"checkpoints of run {run_id!r} are missing or unreadable", run_id=run_id
            )
        for row in found if verify else ():
            verify_checkpoint(run_id, row, self._legacy)
        return found

    def delete(self, run_id: str) -> None:
        """Delete a run, its checkpoints and the message nodes no other run uses."""
        with self._lock:
            self._conn.execute("CREATE TEMP TABLE IF NOT EXISTS nbdurable_gc (id BLOB PRIMARY KEY)")
            with self._write() as conn:
                conn.execute("DELETE FROM temp.nbdurable_gc")
                conn.execute(_GC_COLLECT, (run_id,))
                conn.execute("DELETE FROM checkpoints WHERE run_id = ?", (run_id,))
                conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
                delete_events(conn, run_id)
                self._rt_forget(conn, run_id)
                conn.execute(_GC_SWEEP)
                conn.execute("DELETE FROM temp.nbdurable_gc")
            self._chains.drop(run_id)

    def reclaim_space(self) -> str:
        """``VACUUM``: rewrite the database without its free pages; says how it shrank."""

        def size() -> int:
            (pages,) = self._conn.execute("PRAGMA page_count").fetchone()
            (page_size,) = self._conn.execute("PRAGMA page_size").fetchone()
            return int(pages) * int(page_size)

        with self._lock:
            before = size()
            self._retry_locked(lambda: self._conn.execute("VACUUM"))
            after = size()
        return f"VACUUM: {before:,} bytes -> {after:,} bytes"

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._closed = True
            if self._nowait_conn is not None:
                self._nowait_conn.close()
            self._close_checkpoints()
            self._conn.close()

    def __enter__(self) -> SqliteSessionStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SqliteSessionStore({self.path!r})"

    def _cached_messages(
        self, run_id: str, head: bytes | None, count: int
    ) -> tuple[Message, ...] | None:
        own = self._chains.get(run_id)
        found = own.prefix(head, count) if own is not None else None
        return found if found is not None else self._chains.find(head, count)

    def _read_chain(
        self, conn: sqlite3.Connection, head: bytes | None, row: CheckpointRow
    ) -> builtins.list[NodeRow]:
        nodes: builtins.list[NodeRow] = []
        if head is not None:
            try:
                found = conn.execute(_CHAIN, (head, row.message_count)).fetchall()
            except sqlite3.OperationalError as exc:
                if "decode" not in str(exc):
                    raise
                raise row.corruption(f"a message is not valid text: {exc}") from exc
            found.reverse()
            try:
                nodes = [(nid, parent, unpack_json(text)) for nid, parent, text in found]
            except StoreCorruptionError as exc:
                raise row.corruption(f"a message does not decode: {exc}") from exc
        verify_chain(nodes, head, row.message_count, run_id=row.run_id, step_index=row.step_index)
        return nodes

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front, so the busy timeout applies
        # to it; a deferred transaction that upgrades to a write can fail with
        # "database is locked" without waiting.
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        self._checkpoint_wal()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # One snapshot for rows and what checks them (a checkpoint row and its
        # chain, records and the count of another index): a commit in between
        # must not look like damage. Inside a transaction already: that one.
        begun = not self._conn.in_transaction
        if begun:
            self._conn.execute("BEGIN")
        try:
            yield self._conn
        finally:
            if begun and self._conn.in_transaction:
                self._conn.execute("COMMIT")

    def _retry_locked(self, action: Callable[[], T]) -> T:
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)


guard_methods(SqliteSessionStore, SqliteRuntimeTables)
# A runtime owner's writes and one-row reads are short transactions too; bulk
# reads (lists, loads that decode a history) stay on store threads.
SqliteSessionStore.nowait_methods = {
    name: getattr(SqliteSessionStore, name)
    for name in (
        "save",
        "save_with_events",
        "append_events",
        "rt_get",
        "rt_update",
        "rt_verdict",
        "rt_claim_notices",
        "rt_grants",
        "rt_late_result",
        "rt_claim",
        "rt_renew",
        "rt_intent",
        "rt_commit",
        "rt_intents",
        "rt_journal",
        "rt_journaled",
    )
}
