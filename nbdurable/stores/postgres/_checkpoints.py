"""The checkpoint part of the PostgreSQL store: checkpoint rows over one message chain.

Messages are stored once, as a content-addressed chain (see :mod:`..chain`, the
same node ids as the SQLite store); a checkpoint row holds only metadata and the
id of its last message node. A save writes the nodes it adds plus one row, in
one transaction, so its cost does not grow with the history.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...durable._checkpoint import AgentCheckpoint, CheckpointInfo
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
from .._rows import COLUMNS, CheckpointRow, checkpoint_row, run_record
from ._db import PostgresDb
from ._runs import PostgresRunRecords
from ._sql import added_events, event_params

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = ["DELETE_BATCH", "PostgresCheckpoints"]

DELETE_BATCH = 500
"""Runs a bulk delete removes per transaction (saves wait for each, not for the whole prune)."""


class PostgresCheckpoints:
    """Checkpoints of :class:`~nbdurable.stores.postgres.PostgresSessionStore`, and their deletion.

    Its methods do what :class:`~nbdurable.stores._composed.ComposedStore` says.

    Args:
        db: The schema's connection, shared with the store's other parts.
        runs: The run records (a deleted run's records go with it; a fenced save checks them).
    """

    def __init__(self, db: PostgresDb, runs: PostgresRunRecords) -> None:
        self._db = db
        self._runs = runs
        self._lock = threading.Lock()  # the chain cache's
        self._chains = ChainCache()

    def save(
        self,
        checkpoint: AgentCheckpoint,
        events: Sequence[NewEvent],
        fence: int | None = None,
        *,
        extends: Sequence[Message] | None = None,
    ) -> builtins.list[Event]:
        run_id = checkpoint.run_id
        messages = checkpoint.messages
        row = checkpoint_row(checkpoint)
        params: dict[str, Any] = {name: getattr(row, name) for name in COLUMNS}
        params["run_id"] = run_id
        with self._lock:
            cached = self._chains.get(run_id)
        known = known_prefix(cached, messages, extends)
        parent = cached.ids[known - 1] if cached is not None and known else None
        new_ids, new_rows = extend_chain(parent, messages[known:])
        params["head"] = new_ids[-1] if new_ids else parent
        params["base"] = parent
        if events:
            params.update(event_params(run_id, events, self._db.notify_channel))
        last = self._db.transact(
            lambda conn: self._write_save(conn, params, new_rows, bool(events), fence)
        )
        if last is None:
            # Another process deleted the nodes this process remembered: write
            # the whole chain (the ids are the same).
            _, rows = extend_chain(None, messages)
            params["base"] = None
            last = self._db.transact(
                lambda conn: self._write_save(conn, params, rows, bool(events), fence)
            )
            if last is None:  # pragma: no cover - the chain has no base now
                raise AssertionError("a save without a base node wrote nothing")
        with self._lock:
            # grown() copies the ids unless the cached chain is still this run's latest.
            latest = self._chains.get(run_id) is cached and cached is not None
            grown = cached.grown(known, messages, new_ids) if latest and cached else None
            if grown is None:
                ids = [*cached.ids[:known]] if cached is not None else []
                grown = Chain(messages, [*ids, *new_ids])
            self._chains.put(run_id, grown)
        return added_events(run_id, events, last) if events else []

    def load(self, run_id: str, step_index: int | None = None) -> AgentCheckpoint | None:
        query = self._db.q.latest if step_index is None else self._db.q.at_step
        args: tuple[object, ...] = (run_id,) if step_index is None else (run_id, step_index)
        with self._db.pool.connection() as conn:
            found = conn.execute(query, args).fetchone()
            if found is None:
                return None
            row = CheckpointRow.from_values(run_id, found[2:])
            with self._lock:
                messages = self._chains.messages(run_id, found[1], row.message_count)
            if messages is not None:
                return row.checkpoint(messages)
            # Not cached: read the row again and its chain in one snapshot (a
            # delete committed in between must not look like a broken chain),
            # pipelined into one round trip.
            chain = self._db.q.chain_latest if step_index is None else self._db.q.chain_at_step
            with self._db.transaction(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"):
                meta = conn.execute(query, args)
                walk = conn.execute(chain, args)
            found = meta.fetchone()
            nodes: builtins.list[NodeRow] = walk.fetchall()
        if found is None:
            return None
        head: bytes | None = found[1]
        row = CheckpointRow.from_values(run_id, found[2:])
        verify_chain(nodes, head, row.message_count, run_id=run_id, step_index=row.step_index)
        messages = decode_messages(
            [text for _, _, text in nodes],
            run_id=run_id,
            step_index=row.step_index,
            verified=True,  # verify_chain checked every node's hash
        )
        with self._lock:
            self._chains.put(run_id, Chain(messages, [nid for nid, _, _ in nodes]))
        return row.checkpoint(messages)

    def history(self, run_id: str) -> builtins.list[CheckpointInfo]:
        with self._db.pool.connection() as conn:
            found = conn.execute(self._db.q.history, (run_id,)).fetchall()
        return [CheckpointRow.from_values(run_id, values[2:]).info() for values in found]

    def list(self) -> builtins.list[str]:
        with self._db.pool.connection() as conn:
            found = conn.execute(self._db.q.list).fetchall()
        return [run_id for (run_id,) in found]

    def list_runs(self) -> builtins.list[RunRecord]:
        with self._db.pool.connection() as conn:
            found = conn.execute(self._db.q.runs).fetchall()
        return [run_record(run_id, seq, created, values) for run_id, seq, created, *values in found]

    def delete(self, run_id: str) -> None:
        """Under a SHARE lock of the nodes and checkpoints tables: saves wait while it runs."""
        self.delete_many([run_id])

    def delete_many(self, run_ids: Sequence[str], batch: int = DELETE_BATCH) -> None:
        """Delete runs set-based: a few statements per ``batch`` runs, one transaction each.

        Each transaction holds the tables' SHARE lock (saves wait for it), so a
        batch bounds how long saves wait; a batch commits whole or not at all.
        """
        ids = builtins.list(run_ids)
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]

            def sweep(conn: Connection[tuple[Any, ...]], chunk: builtins.list[str] = chunk) -> None:
                with self._db.transaction(conn):
                    conn.execute(self._db.q.delete_lock)
                    conn.execute(self._db.q.sweep, {"run_ids": chunk})
                    conn.execute(self._db.q.delete_checkpoints, (chunk,))
                    conn.execute(self._db.q.delete_run, (chunk,))
                    conn.execute(self._db.q.delete_event_head, (chunk,))
                    conn.execute(self._db.q.delete_events, (chunk,))
                    self._runs.forget(conn, chunk)

            self._db.transact(sweep)
            with self._lock:
                for run_id in chunk:
                    self._chains.drop(run_id)

    def _write_save(
        self,
        conn: Connection[tuple[Any, ...]],
        params: dict[str, Any],
        rows: Sequence[NodeRow],
        with_events: bool,
        fence: int | None = None,
    ) -> int | None:
        """One save's transaction; the run's last event offset (0 without events).

        None when the chain's base node is gone: then nothing was written.
        """
        with self._db.transaction(conn):
            if fence is not None:
                self._runs.rt_check_fence(params["run_id"], fence, conn)
            if rows:
                nodes = {
                    "ids": [r[0] for r in rows],
                    "parents": [r[1] for r in rows],
                    "texts": [r[2] for r in rows],
                    "base": params["base"],
                }
                conn.execute(self._db.q.insert_nodes, nodes)
            if with_events:
                written = conn.execute(self._db.q.save_with_events, params)
            else:
                written = conn.execute(self._db.q.insert_checkpoint, params)
        if not with_events:
            return 0 if written.rowcount == 1 else None
        found = written.fetchone()
        return None if found is None else int(found[0])
