"""The checkpoint part of the SQLite store: checkpoint rows over one message chain.

Messages are stored once, as a content-addressed chain (see :mod:`..chain`); a
checkpoint row holds only metadata and the id of its last message node. A save
writes the nodes it adds plus one row, in one ``BEGIN IMMEDIATE`` transaction,
so its cost does not grow with the history.
"""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..._errors import StoreCorruptionError
from ..._gc import gc_paused
from ...durable._checkpoint import AgentCheckpoint, CheckpointInfo
from ...durable._checkpoint_size import note_loaded
from ...durable._records import RunRecord
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
from .._history_columns import ColumnsPart, HistoryColumns
from .._packing import unpack_json
from .._rows import (
    COLUMNS,
    CheckpointRow,
    checkpoint_row,
    run_record,
    verified_columns,
    verified_infos,
)
from ._crc import latest_row, pick_at_step, row_crc, verify_checkpoints, verify_run
from ._db import SqliteDb
from ._events import LAST_EVENT_SUBQUERY, append_events, delete_events
from ._rows import checkpoint_values, node_rows
from ._runs import SqliteRunRecords, check_fence

__all__ = ["SqliteCheckpoints"]

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


_HEAD_ROWID = "SELECT rowid FROM nodes WHERE id = ?"
_BY_ROWID = "SELECT id, parent, message FROM nodes WHERE rowid BETWEEN ? AND ?"
_WALK_FROM = 16  # shorter chains: the recursive query is as quick


def _chain_rows(conn: sqlite3.Connection, head: bytes, count: int) -> builtins.list[Any]:
    """The rows of the chain ending at ``head``, head first, at most ``count`` of them.

    A run writes its nodes in order, so they usually sit at consecutive rowids
    below its head's: one range read by rowid, then a walk of the parent links
    in memory, costs a fraction of the recursive query's two index seeks per
    node (a cold load of 10,000 messages, issue 42). Where the walk stops (nodes
    another run wrote first, interleaved writers, a gap), the recursive query
    reads the rest. What it returns is checked by ``verify_chain`` either way, so
    a row read here that is not the chain's is an error there, never a message.
    """
    if count < _WALK_FROM:
        return conn.execute(_CHAIN, (head, count)).fetchall()
    found = conn.execute(_HEAD_ROWID, (head,)).fetchone()
    if found is None or type(found[0]) is not int:
        return conn.execute(_CHAIN, (head, count)).fetchall()
    top = found[0]
    try:
        window = conn.execute(_BY_ROWID, (top - count + 1, top)).fetchall()
    except sqlite3.OperationalError:
        # A row of another run in the window may be damaged: read only this chain.
        return conn.execute(_CHAIN, (head, count)).fetchall()
    by_id = {node[0]: node for node in window}
    chain: builtins.list[Any] = []
    nid: object = head
    while len(chain) < count and (node := by_id.get(nid)) is not None:
        chain.append(node)
        nid = node[1]
    if len(chain) < count and nid is not None:
        chain += conn.execute(_CHAIN, (nid, count - len(chain))).fetchall()
    return chain


class SqliteCheckpoints(ColumnsPart):
    """Checkpoints of :class:`~nbdurable.stores.sqlite.SqliteSessionStore`, and their deletion.

    Its methods do what :class:`~nbdurable.stores._composed.ComposedStore` says.

    Args:
        db: The file's connection, shared with the store's other parts.
        runs: The run records (a deleted run's records go with it).
    """

    def __init__(self, db: SqliteDb, runs: SqliteRunRecords) -> None:
        self._db = db
        self._runs = runs
        self._chains = ChainCache()

    def save(
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
        with self._db.lock:
            cached = self._chains.get(run_id)
            known = known_prefix(cached, messages, extends)
            parent = cached.ids[known - 1] if cached is not None and known else None
            new_ids, new_rows = extend_chain(parent, messages[known:])
            head = new_ids[-1] if new_ids else parent
            with self._db.write() as conn:
                last_seq, has_parent, last_event, owner, created, updated, run_crc = conn.execute(
                    _SAVE_STATE, (run_id, parent)
                ).fetchone()
                if last_seq is not None:  # a damaged row is refused, not given a valid checksum
                    verify_run(run_id, (created, updated, last_seq, run_crc), self._db.legacy)
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
                self._db.checkpoint_wal(force=True)
        return added

    def load(self, run_id: str, step_index: int | None = None) -> AgentCheckpoint | None:
        with self._db.lock, self._db.read() as conn:
            if step_index is None:
                found = self._latest(conn, run_id)
            else:
                self._db.few_here(None)  # every checkpoint row is read: on a store thread
                # Every checkpoint row of the run, numbered without a hole (a row
                # a damaged index or page hides is an error), and the step index's
                # own answer: see pick_at_step.
                rows = self._checkpoints(conn, run_id, verify=False)
                indexed = conn.execute(_AT_STEP, (run_id, step_index)).fetchall()
                found = pick_at_step(
                    run_id, rows, [s for (s,) in indexed], step_index, self._db.legacy
                )
            if found is None:
                return None
            head: bytes | None = found[1]
            row = CheckpointRow.from_values(run_id, found[2 : 2 + len(COLUMNS)])
            messages = self._chains.messages(run_id, head, row.message_count)
            texts = None
            if messages is None:
                # A long history to read and decode: on a store thread.
                self._db.few_here(row.message_count)
                with gc_paused():
                    nodes = self._read_chain(conn, head, row)
                    texts = [text for _, _, text in nodes]
                    messages = decode_messages(
                        texts,
                        run_id=run_id,
                        step_index=row.step_index,
                        verified=True,  # _read_chain checked every node's hash
                    )
                self._chains.put(run_id, Chain(messages, [nid for nid, _, _ in nodes]))
        checkpoint = row.checkpoint(messages)
        if texts:
            # The texts are the messages' model_dump_json (their hashes say so): a
            # runtime's payload limit measures the loaded history by them.
            note_loaded(checkpoint.messages, len("".join(texts).encode("utf-8", "replace")))
        return checkpoint

    def history(self, run_id: str) -> builtins.list[CheckpointInfo]:
        with self._db.lock, self._db.read() as conn, gc_paused():
            found = self._checkpoints(conn, run_id)
        end = 2 + len(COLUMNS)
        rows = [CheckpointRow.from_values(run_id, values[2:end]) for values in found]
        # A row with a checksum was verified by _checkpoints (a legacy row has none).
        if all(values[-1] is not None for values in found):
            with gc_paused():
                return verified_infos(rows)
        return [row.info() for row in rows]

    def history_columns(self, run_id: str) -> HistoryColumns:
        """What :meth:`history` lists, as columns (see :mod:`.._history_columns`).

        The same rows, read and verified the same way (the run row, the
        numbering, every row's checksum); no object per checkpoint.
        """
        with self._db.lock, self._db.read() as conn, gc_paused():
            found = self._checkpoints(conn, run_id)
        with gc_paused():
            if all(values[-1] is not None for values in found):
                return verified_columns(run_id, found, 2)
            end = 2 + len(COLUMNS)
            infos = [CheckpointRow.from_values(run_id, values[2:end]).info() for values in found]
            return HistoryColumns.from_infos(run_id, infos)

    def list(self) -> builtins.list[str]:
        with self._db.lock:
            found = self._db.conn.execute(
                "SELECT run_id, created_at, updated_at, last_seq, crc FROM runs ORDER BY id"
            ).fetchall()
        for run_id, *rest in found:
            verify_run(str(run_id), rest, self._db.legacy)
        return [run_id for (run_id, *_) in found]

    def list_runs(self) -> builtins.list[RunRecord]:
        with self._db.lock:
            found = self._db.conn.execute(_RUNS).fetchall()
        records = []
        for run_id, *values in found:
            row = latest_row(str(run_id), values, self._db.legacy)
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
        return latest_row(run_id, found, self._db.legacy)

    def _checkpoints(
        self, conn: sqlite3.Connection, run_id: str, *, verify: bool = True
    ) -> builtins.list[tuple[Any, ...]]:
        """Every checkpoint row of a run in save order: ``(seq, head, *columns, crc)``.

        Numbered 1..last_seq (the run row verified); each row verified unless not ``verify``.
        """
        found = conn.execute(_HISTORY, (run_id,)).fetchall()
        run = conn.execute(_RUN_ROW, (run_id,)).fetchone()
        if run is not None:
            verify_run(run_id, run, self._db.legacy)
        # Saves are numbered 1..last_seq: anything else is rows a damaged page hides.
        # (compared without building 1..last_seq: a damaged last_seq can be huge)
        last = run[2] if run else 0
        if len(found) != last or any(v[0] != i for i, v in enumerate(found, 1)):
            raise StoreCorruptionError(
                f"checkpoints of run {run_id!r} are missing or unreadable", run_id=run_id
            )
        if verify:
            verify_checkpoints(run_id, found, self._db.legacy)
        return found

    def delete(self, run_id: str) -> None:
        with self._db.lock:
            self._db.conn.execute(
                "CREATE TEMP TABLE IF NOT EXISTS nbdurable_gc (id BLOB PRIMARY KEY)"
            )
            with self._db.write() as conn:
                conn.execute("DELETE FROM temp.nbdurable_gc")
                conn.execute(_GC_COLLECT, (run_id,))
                conn.execute("DELETE FROM checkpoints WHERE run_id = ?", (run_id,))
                conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
                delete_events(conn, run_id)
                self._runs.forget(conn, run_id)
                conn.execute(_GC_SWEEP)
                conn.execute("DELETE FROM temp.nbdurable_gc")
            self._chains.drop(run_id)

    def _read_chain(
        self, conn: sqlite3.Connection, head: bytes | None, row: CheckpointRow
    ) -> builtins.list[NodeRow]:
        nodes: builtins.list[NodeRow] = []
        if head is not None:
            try:
                found = _chain_rows(conn, head, row.message_count)
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
