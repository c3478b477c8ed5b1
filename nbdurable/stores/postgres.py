"""A PostgreSQL store: the SQLite store's model on a shared server, through a connection pool.

Messages are stored once, as a content-addressed chain (see :mod:`.chain`, the
same node ids as the SQLite store); a checkpoint row holds only metadata and the
id of its last message node. A save writes the nodes it adds plus one row, in
one transaction, so its cost does not grow with the history. The schema lives
in :mod:`.postgres_schema`.

The store keeps each run's event log too: an append takes its offsets from a
per-run counter row in the writing transaction and sends ``NOTIFY`` on the
store's channel before it commits, so a subscriber in another process is woken
at once (:meth:`PostgresSessionStore.wait_for_events`, see :mod:`.postgres_listen`).

psycopg is imported when a store is created, not when this module is: the
class can be named (``from nbdurable import *``) without the extra installed.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._errors import ConfigurationError, RunNotFoundError, StoreCorruptionError
from ..durable.checkpoint import AgentCheckpoint, CheckpointInfo
from ..durable.records import RunRecord
from ..durable.store import (
    HISTORY,
    INCREMENTAL,
    MULTIPROCESS,
    PERSISTENT,
    RUNTIME,
    VERSIONED_SCHEMA,
)
from ..durable.transient import retry_deadline
from ..events.log import EVENTS, notify
from ..events.log import wait_for_events as wait_locally
from ..events.model import Event, NewEvent
from ..messages import Message
from .chain import (
    Chain,
    ChainCache,
    NodeRow,
    decode_messages,
    extend_chain,
    identical_prefix,
    verify_chain,
)
from .postgres_listen import Listener
from .postgres_runtime import PostgresRuntimeTables
from .postgres_schema import SCHEMA_VERSION, advisory_key, migrate, quote_ident
from .rows import COLUMNS, CheckpointRow, checkpoint_row, run_record

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresSessionStore"]

T = TypeVar("T")

_EXTRA = "nbdurable[postgres]"
_META = ", ".join(f"c.{name}" for name in COLUMNS)
# Parameters in a SELECT list get no type from the target column: cast each one.
_CASTS = {
    "version": "integer",
    "step_index": "integer",
    "status": "text",
    "message_count": "integer",
    "usage": "text",
    "pending_approvals": "text",
    "agent_path": "text",
    "created_at": "bigint",
    "finish_reason": "text",
    "extra": "text",
}
_EVENT_COLUMNS = "position, type, step_index, operation_id, attempt_id, payload, created_at"
_CHANNEL_PREFIX = "nbdurable_events:"
_MAX_IDENTIFIER = 63  # bytes: PostgreSQL's NAMEDATALEN - 1
_MAX_NOTICE = 7999  # bytes: a NOTIFY payload must be shorter than 8000


@dataclass(frozen=True)
class _Statements:
    """Every statement the store runs, for one schema."""

    save_lock: str
    delete_lock: str
    insert_nodes: str
    insert_checkpoint: str
    latest: str
    at_step: str
    chain_latest: str
    chain_at_step: str
    history: str
    list: str
    runs: str
    sweep: str
    delete_checkpoints: str
    delete_run: str
    append_events: str
    save_with_events: str
    read_events: str
    known_run: str
    last_offset: str
    delete_event_head: str
    delete_events: str

    @classmethod
    def for_schema(cls, schema: str) -> _Statements:
        s = quote_ident(schema)
        latest = (
            f"SELECT c.seq, c.head, {_META} FROM {s}.runs r JOIN {s}.checkpoints c "
            "ON c.run_id = r.run_id AND c.seq = r.last_seq WHERE r.run_id = %s"
        )
        at_step = (
            f"SELECT c.seq, c.head, {_META} FROM {s}.checkpoints c "
            "WHERE c.run_id = %s AND c.step_index = %s ORDER BY c.seq DESC LIMIT 1"
        )
        values = ", ".join(f"%({name})s::{_CASTS[name]}" for name in COLUMNS)
        # The run's row in the runs table, bumped and locked until commit.
        upsert_run = f"""
            INSERT INTO {s}.runs AS r (run_id, created_at, updated_at, last_seq)
            SELECT %(run_id)s::text, %(created_at)s::bigint, %(created_at)s::bigint, 1
            WHERE %(base)s::bytea IS NULL
               OR EXISTS (SELECT 1 FROM {s}.nodes WHERE id = %(base)s::bytea)
            ON CONFLICT (run_id) DO UPDATE
            SET last_seq = r.last_seq + 1, updated_at = EXCLUDED.updated_at
            RETURNING last_seq
        """
        insert_row = (
            f"INSERT INTO {s}.checkpoints (run_id, seq, head, {', '.join(COLUMNS)}) "
            f"SELECT %(run_id)s::text, r.last_seq, %(head)s::bytea, {values} FROM r"
        )
        return cls(
            # Saves share this lock; a delete takes it exclusively, so it never
            # sweeps a node a concurrent save is about to reference.
            save_lock="SELECT pg_advisory_xact_lock_shared(%s)",
            delete_lock="SELECT pg_advisory_xact_lock(%s)",
            # The new nodes, unless the node they hang from is gone (see below).
            insert_nodes=f"""
                INSERT INTO {s}.nodes (id, parent, message)
                SELECT * FROM unnest(%(ids)s::bytea[], %(parents)s::bytea[], %(texts)s::text[])
                WHERE %(base)s::bytea IS NULL
                   OR EXISTS (SELECT 1 FROM {s}.nodes WHERE id = %(base)s::bytea)
                ON CONFLICT (id) DO NOTHING
            """,
            # One statement bumps the run's last_seq (the upsert locks the run
            # row until commit, so two saves of one run serialize) and inserts
            # the checkpoint row under that seq. When the node the new ones hang
            # from (base) is gone, deleted since this process saw it, the save
            # writes nothing and the caller sees a row count of 0.
            insert_checkpoint=f"WITH r AS ({upsert_run}) {insert_row}",
            append_events=f"WITH {_append(s, '')}",
            # A checkpoint with its events, in one statement: the events hang
            # from the run row's upsert, so they are written exactly when the
            # checkpoint is (not when its base node is gone and the save is
            # sent again).
            save_with_events=(
                f"WITH r AS ({upsert_run}), checkpoint AS ({insert_row}), {_append(s, 'FROM r')}"
            ),
            read_events=(
                f"SELECT {_EVENT_COLUMNS} FROM {s}.events "
                "WHERE run_id = %s AND position > %s ORDER BY position LIMIT %s"
            ),
            known_run=(
                f"SELECT EXISTS (SELECT 1 FROM {s}.runs WHERE run_id = %(run_id)s) "
                f"OR EXISTS (SELECT 1 FROM {s}.event_heads WHERE run_id = %(run_id)s) "
                f"OR EXISTS (SELECT 1 FROM {s}.rt_runs WHERE run_id = %(run_id)s)"
            ),
            last_offset=f"SELECT last_position FROM {s}.event_heads WHERE run_id = %s",
            # The counter row goes first: deleting it waits for an append in
            # flight, and the next statement's snapshot then sees that
            # append's events too.
            delete_event_head=f"DELETE FROM {s}.event_heads WHERE run_id = %s",
            delete_events=f"DELETE FROM {s}.events WHERE run_id = %s",
            latest=latest,
            at_step=at_step,
            chain_latest=_chain(s, latest),
            chain_at_step=_chain(s, at_step),
            history=(
                f"SELECT c.seq, c.head, {_META} FROM {s}.checkpoints c "
                "WHERE c.run_id = %s ORDER BY c.seq"
            ),
            list=f"SELECT run_id FROM {s}.runs ORDER BY id",
            runs=(
                f"SELECT r.run_id, r.last_seq, r.created_at, {_META} FROM {s}.runs r "
                f"JOIN {s}.checkpoints c ON c.run_id = r.run_id AND c.seq = r.last_seq "
                "ORDER BY r.id"
            ),
            # Deleting a run: its nodes ("mine") go, except those another
            # checkpoint still reaches (a head of another run, or the parent of
            # a node outside the set, and all their ancestors). One statement,
            # so it sees the run's own checkpoints and excludes them by run_id.
            sweep=f"""
                WITH RECURSIVE mine(id) AS (
                    SELECT head FROM {s}.checkpoints
                    WHERE run_id = %(run_id)s AND head IS NOT NULL
                    UNION
                    SELECT n.parent FROM {s}.nodes n JOIN mine ON n.id = mine.id
                    WHERE n.parent IS NOT NULL
                ),
                keep(id) AS (
                    SELECT m.id FROM mine m
                    WHERE EXISTS (SELECT 1 FROM {s}.checkpoints c
                                  WHERE c.head = m.id AND c.run_id <> %(run_id)s)
                       OR EXISTS (SELECT 1 FROM {s}.nodes n WHERE n.parent = m.id
                                  AND NOT EXISTS (SELECT 1 FROM mine x WHERE x.id = n.id))
                    UNION
                    SELECT n.parent FROM {s}.nodes n JOIN keep ON n.id = keep.id
                    WHERE n.parent IS NOT NULL
                )
                DELETE FROM {s}.nodes
                WHERE id IN (SELECT id FROM mine) AND id NOT IN (SELECT id FROM keep)
            """,
            delete_checkpoints=f"DELETE FROM {s}.checkpoints WHERE run_id = %s",
            delete_run=f"DELETE FROM {s}.runs WHERE run_id = %s",
        )


def _append(s: str, source: str) -> str:
    """The CTEs and final SELECT appending a batch of events to a run's log.

    The upsert of the run's counter row adds the batch's size and returns the
    new last offset; the row stays locked until commit, so appenders of one run
    (from any process) queue on it and the offsets have no hole. The batch
    arrives as one array per column, sent in binary (psycopg's text format
    escapes every element with a regular expression: five times slower). The
    statement returns the last offset and sends ``NOTIFY`` (delivered at
    commit); it returns no row when ``source`` (``FROM r``: the run row's
    upsert) yields none.
    """
    return f"""
        head AS (
            INSERT INTO {s}.event_heads AS h (run_id, last_position)
            SELECT %(run_id)s::text, %(count)s::bigint {source}
            ON CONFLICT (run_id) DO UPDATE
            SET last_position = h.last_position + EXCLUDED.last_position
            RETURNING last_position
        ),
        added AS (
            INSERT INTO {s}.events (run_id, {_EVENT_COLUMNS})
            SELECT %(run_id)s::text, head.last_position - %(count)s::bigint + e.ord,
                   e.type, e.step_index, e.operation_id, e.attempt_id, e.payload, e.created_at
            FROM head, unnest(%(types)b::text[], %(steps)b::integer[], %(operations)b::text[],
                              %(attempts)b::text[], %(payloads)b::text[], %(times)b::bigint[])
                 WITH ORDINALITY AS e(type, step_index, operation_id, attempt_id, payload,
                                      created_at, ord)
        )
        SELECT head.last_position, pg_notify(%(channel)s::text, %(notice)s::text) FROM head
    """


def _chain(s: str, checkpoint: str) -> str:
    # One query walks the chain from the checkpoint's head up to the root; it
    # finds the checkpoint itself, so it needs no value from an earlier query.
    # The depth bound stops a corrupt cycle, and verify_chain notices a chain
    # that is too short or too long.
    return f"""
        WITH RECURSIVE c AS ({checkpoint}),
        chain(id, parent, message, depth) AS (
            SELECT n.id, n.parent, n.message, 1 FROM {s}.nodes n JOIN c ON n.id = c.head
            UNION ALL
            SELECT n.id, n.parent, n.message, chain.depth + 1
            FROM {s}.nodes n JOIN chain ON n.id = chain.parent
            WHERE chain.depth < (SELECT c.message_count FROM c)
        )
        SELECT id, parent, message FROM chain ORDER BY depth DESC
    """


class PostgresSessionStore(PostgresRuntimeTables):
    """Checkpoints in PostgreSQL: every checkpoint kept, only what is new written.

    Connections come from a ``psycopg_pool.ConnectionPool``; the store is
    thread-safe and several processes (or store instances) may write to one
    database at once: saves of different runs do not wait for each other, two
    saves of one run queue on the run's row. The tables live in their own
    PostgreSQL schema (created when missing), so the store can share a database.
    The schema is migrated on open. Open the store in each process (a pool does
    not survive ``fork``).

    The store keeps each run's event log (the ``events`` capability). Every
    append sends ``NOTIFY`` on :attr:`notify_channel` (payload: the run id), and
    :meth:`wait_for_events`, which :func:`nbdurable.subscribe` uses, wakes on
    it: subscribers in other processes see new events at once, not at their
    next poll. Listening takes one more connection, outside the pool, opened
    on the first wait.

    It keeps the runtime's run records too (the ``runtime`` capability, see
    :mod:`.postgres_runtime`): several runtimes or workers, in any process or
    host, may share one database; ``fence=`` on :meth:`save_with_events` and
    :meth:`append_events` is checked in the write's transaction.

    Args:
        dsn: A libpq connection string or URL (``postgresql://user@host:5432/db``).
            A URL may carry ``?schema=name``, which this store reads and libpq never sees.
        schema: The PostgreSQL schema holding the tables (default ``"nbdurable"``).
        min_size: Connections the pool keeps open.
        max_size: Most connections the pool opens; more concurrent calls wait.
        timeout: Seconds a call waits for a free connection before failing.
        pool_kwargs: More ``psycopg_pool.ConnectionPool`` arguments
            (``max_idle``, ``check``, ...).

    Raises:
        ConfigurationError: The ``nbdurable[postgres]`` extra is not installed,
            or ``schema`` is given twice with different values.
        CheckpointVersionError: The database's schema is newer than this nbdurable.
        psycopg.OperationalError: The server cannot be reached.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset(
        {HISTORY, PERSISTENT, INCREMENTAL, MULTIPROCESS, VERSIONED_SCHEMA, EVENTS, RUNTIME}
    )

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        pool_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        psycopg, pool_module = _driver()
        conninfo, from_url = _split_schema(dsn)
        if schema is not None and from_url is not None and schema != from_url:
            raise ConfigurationError(
                f"schema given twice: {schema!r} as an argument, {from_url!r} in the URL"
            )
        chosen = schema if schema is not None else from_url
        self.schema: str = "nbdurable" if chosen is None else chosen
        """The PostgreSQL schema holding the store's tables."""
        self._q = _Statements.for_schema(self.schema)
        self._gc_key = advisory_key("gc", self.schema)
        self._where = _describe(psycopg, conninfo)
        self.notify_channel: str = _notify_channel(self.schema)
        """The channel every append notifies (payload: the run id), per schema."""
        self._conninfo = conninfo
        self._lock = threading.Lock()
        self._chains = ChainCache()
        self._listener: Listener | None = None
        self._waiting: Counter[str] = Counter()  # run ids subscribers wait on
        self._closed = False
        # Pipeline mode needs libpq 14 (the binary wheel bundles a newer one).
        self._pipelined: bool = psycopg.Pipeline.is_supported()
        # A direct connection first: a wrong DSN fails at once with libpq's
        # message, instead of the pool retrying in the background until timeout.
        with psycopg.connect(conninfo, autocommit=True) as conn:
            migrate(conn, self.schema, f"{self._where} (schema {self.schema!r})")
        options: dict[str, Any] = {
            # After a lost server, connection attempts back off 1, 2, 4... s and
            # give up after reconnect_timeout; each give-up starts a fresh
            # attempt (_reconnect_failed), so a server that comes back is
            # reconnected to within about 2 s, however long it was away.
            "reconnect_timeout": 5.0,
            "reconnect_failed": _reconnect_failed,
            **dict(pool_kwargs or {}),
        }
        self._pool: ConnectionPool[Connection[tuple[Any, ...]]] = _pool_class(pool_module)(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            kwargs={"autocommit": True},
            open=False,
            name=f"nbdurable:{self.schema}",
            **options,
        )
        self._pool.open()

    @property
    def pool(self) -> ConnectionPool[Connection[tuple[Any, ...]]]:
        """The connection pool (its ``get_stats()`` tells how connections are used)."""
        return self._pool

    def recover_connections(self, error: BaseException | None = None) -> None:
        """Drop the pooled connections a lost server broke; the pool opens new ones.

        After a server restart every idle connection in the pool is dead, and
        each would fail one call before the pool noticed. Retries
        (:class:`~nbdurable.durable.transient.StoreRetry`) call this after a
        connection-level failure: the idle connections are checked at once
        (one round trip each), the broken ones are replaced in the background.
        A serialization failure or deadlock (``error`` with SQLSTATE class 40)
        leaves the pool alone.
        """
        state = getattr(error, "sqlstate", None) or ""
        if state.startswith("40") or self._closed:
            return
        self._pool.check()

    @property
    def schema_version(self) -> int:
        """The schema version this store writes (the database's, after migrations)."""
        return SCHEMA_VERSION

    @property
    def event_channel(self) -> str:
        """Identifies this database and schema's event log for in-process subscribers."""
        return f"{self._where}?schema={self.schema}"

    def save(self, checkpoint: AgentCheckpoint) -> None:
        """Store a checkpoint in one transaction: its new message nodes and one row."""
        self._save(checkpoint, ())

    def save_with_events(
        self, checkpoint: AgentCheckpoint, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> builtins.list[Event]:
        """Store a checkpoint and append events to its run's log in one transaction.

        With ``fence`` (a runtime owner's token) the write is refused with
        :class:`~nbdurable.FencedOutError` when another runtime owns the run now,
        checked in the same transaction.
        """
        return self._save(checkpoint, events, fence)

    def append_events(
        self, run_id: str, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> builtins.list[Event]:
        """Append events in one transaction (one round trip); offsets continue from the last one.

        ``fence``: refused when stale, as in :meth:`save_with_events`.
        """
        if not events:
            return []
        batch = self._batch(run_id, events)

        def append(conn: Connection[tuple[Any, ...]]) -> int:
            with self._transaction(conn):
                if fence is not None:
                    self.rt_check_fence(run_id, fence, conn)
                found = conn.execute(self._q.append_events, batch)
            row = found.fetchone()
            assert row is not None  # the upsert always returns the run's counter
            return int(row[0])

        return _added(run_id, events, self._transact(append))

    def read_events(
        self, run_id: str, after: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        """Events with offset > ``after``, in order (one round trip).

        Raises:
            RunNotFoundError: The store has no checkpoint and no event of the run.
            StoreCorruptionError: An event's payload is not JSON.
        """
        with self._pool.connection() as conn:
            with conn.pipeline() if self._pipelined else nullcontext():
                found = conn.execute(self._q.read_events, (run_id, after, limit))
                known = conn.execute(self._q.known_run, {"run_id": run_id})
            rows = found.fetchall()
            exists = known.fetchone()
        if not rows and not (exists and exists[0]):
            raise RunNotFoundError(run_id)
        try:
            return [_event(run_id, row) for row in rows]
        except ValueError as exc:
            raise StoreCorruptionError(
                f"an event of run {run_id!r} is damaged: {exc}", run_id=run_id
            ) from exc

    async def wait_for_events(
        self, run_id: str, timeout: float, *, after: int | None = None
    ) -> None:
        """Sleep until events of ``run_id`` are committed, or ``timeout`` seconds pass.

        Any process's append wakes it (``NOTIFY``), a writer in this process
        too; a wake-up may also be spurious, so read again after it. The first
        call starts the listener (:meth:`listen`); after a lost connection it
        reconnects by itself and wakes every waiter.

        Args:
            run_id: The run to wait for.
            timeout: Seconds to wait at most (the polling interval).
            after: The offset the caller has read up to. With it, no wake-up is
                lost to a race: the wait registers, then looks at the run's
                last offset (one query) and returns at once when it is past
                ``after``, so an append committed between the caller's read and
                this wait is not left to the timeout.
        """
        self._listen()
        with self._lock:
            self._waiting[run_id] += 1
        try:
            if after is None:
                await wait_locally(self, run_id, timeout)
                return
            waiter = asyncio.ensure_future(wait_locally(self, run_id, timeout))
            try:
                await asyncio.sleep(0)  # the waiter registers with the hub first:
                if self._last_offset(run_id) <= after:  # a later append wakes it
                    await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()
                    with suppress(asyncio.CancelledError):
                        await waiter
        finally:
            with self._lock:
                self._waiting[run_id] -= 1
                if self._waiting[run_id] <= 0:
                    del self._waiting[run_id]

    def listen(self, timeout: float = 10.0) -> bool:
        """Start listening for notifications now and wait until ``LISTEN`` is in place.

        :meth:`wait_for_events` starts the listener by itself; call this to
        have it ready before the first wait. Returns False when it is not
        listening after ``timeout`` seconds (it keeps trying in the background)
        or the store is closed.
        """
        listener = self._listen()
        return listener is not None and listener.wait_ready(timeout)

    def _save(
        self, checkpoint: AgentCheckpoint, events: Sequence[NewEvent], fence: int | None = None
    ) -> builtins.list[Event]:
        run_id = checkpoint.run_id
        messages = checkpoint.messages
        row = checkpoint_row(checkpoint)
        params: dict[str, Any] = {name: getattr(row, name) for name in COLUMNS}
        params["run_id"] = run_id
        with self._lock:
            cached = self._chains.get(run_id)
        known = identical_prefix(cached.messages, messages) if cached is not None else 0
        base = cached.ids[:known] if cached is not None else ()
        new_ids, new_rows = extend_chain(base[-1] if base else None, messages[known:])
        ids = (*base, *new_ids)
        params["head"] = ids[-1] if ids else None
        params["base"] = base[-1] if base else None
        if events:
            params.update(self._batch(run_id, events))
        last = self._transact(lambda conn: self._write(conn, params, new_rows, bool(events), fence))
        if last is None:
            # Another process deleted the nodes this process remembered: write
            # the whole chain (the ids are the same).
            _, rows = extend_chain(None, messages)
            params["base"] = None
            last = self._transact(lambda conn: self._write(conn, params, rows, bool(events), fence))
            if last is None:  # pragma: no cover - the chain has no base now
                raise AssertionError("a save without a base node wrote nothing")
        with self._lock:
            self._chains.put(run_id, Chain(messages, ids))
        return _added(run_id, events, last) if events else []

    def load(self, run_id: str, step_index: int | None = None) -> AgentCheckpoint | None:
        """Return the latest checkpoint, or the latest one saved at ``step_index``.

        Raises:
            StoreCorruptionError: The checkpoint's data is damaged (names the run and step).
            CheckpointVersionError: The checkpoint was written with a newer version.
        """
        query = self._q.latest if step_index is None else self._q.at_step
        args: tuple[object, ...] = (run_id,) if step_index is None else (run_id, step_index)
        with self._pool.connection() as conn:
            found = conn.execute(query, args).fetchone()
            if found is None:
                return None
            row = CheckpointRow.from_values(run_id, found[2:])
            messages = self._cached_messages(run_id, found[1], row.message_count)
            if messages is not None:
                return row.checkpoint(messages)
            # Not cached: read the row again and its chain in one snapshot (a
            # delete committed in between must not look like a broken chain),
            # pipelined into one round trip.
            chain = self._q.chain_latest if step_index is None else self._q.chain_at_step
            with self._transaction(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"):
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
            [text for _, _, text in nodes], run_id=run_id, step_index=row.step_index
        )
        with self._lock:
            self._chains.put(run_id, Chain(messages, tuple(nid for nid, _, _ in nodes)))
        return row.checkpoint(messages)

    def history(self, run_id: str) -> builtins.list[CheckpointInfo]:
        """Metadata of every checkpoint of a run in save order; reads no message."""
        with self._pool.connection() as conn:
            found = conn.execute(self._q.history, (run_id,)).fetchall()
        return [CheckpointRow.from_values(run_id, values[2:]).info() for values in found]

    def list(self) -> builtins.list[str]:
        """Run ids, oldest run first."""
        with self._pool.connection() as conn:
            found = conn.execute(self._q.list).fetchall()
        return [run_id for (run_id,) in found]

    def list_runs(self) -> builtins.list[RunRecord]:
        """One record per run (its latest checkpoint's metadata), oldest run first."""
        with self._pool.connection() as conn:
            found = conn.execute(self._q.runs).fetchall()
        return [run_record(run_id, seq, created, values) for run_id, seq, created, *values in found]

    def delete(self, run_id: str) -> None:
        """Delete a run, its checkpoints and the message nodes no other run uses.

        Holds an advisory lock that saves share, so saves wait while it runs.
        """

        def sweep(conn: Connection[tuple[Any, ...]]) -> None:
            with self._transaction(conn):
                conn.execute(self._q.delete_lock, (self._gc_key,))
                conn.execute(self._q.sweep, {"run_id": run_id})
                conn.execute(self._q.delete_checkpoints, (run_id,))
                conn.execute(self._q.delete_run, (run_id,))
                conn.execute(self._q.delete_event_head, (run_id,))
                conn.execute(self._q.delete_events, (run_id,))
                self._rt_forget(conn, run_id)

        self._transact(sweep)
        with self._lock:
            self._chains.drop(run_id)

    def close(self) -> None:
        """Stop the listener, close the pool and their connections."""
        with self._lock:
            self._closed = True
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        self._pool.close()

    def __enter__(self) -> PostgresSessionStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresSessionStore({self._where!r}, schema={self.schema!r})"

    def _cached_messages(
        self, run_id: str, head: bytes | None, count: int
    ) -> tuple[Message, ...] | None:
        with self._lock:
            own = self._chains.get(run_id)
            found = own.prefix(head, count) if own is not None else None
            return found if found is not None else self._chains.find(head, count)

    def _write(
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
        with self._transaction(conn):
            conn.execute(self._q.save_lock, (self._gc_key,))
            if fence is not None:
                self.rt_check_fence(params["run_id"], fence, conn)
            if rows:
                nodes = {
                    "ids": [r[0] for r in rows],
                    "parents": [r[1] for r in rows],
                    "texts": [r[2] for r in rows],
                    "base": params["base"],
                }
                conn.execute(self._q.insert_nodes, nodes)
            if with_events:
                written = conn.execute(self._q.save_with_events, params)
            else:
                written = conn.execute(self._q.insert_checkpoint, params)
        if not with_events:
            return 0 if written.rowcount == 1 else None
        found = written.fetchone()
        return None if found is None else int(found[0])

    def _batch(self, run_id: str, events: Sequence[NewEvent]) -> dict[str, Any]:
        """An append's parameters: one array per column, and the notification."""
        notice = run_id if len(run_id.encode()) <= _MAX_NOTICE else ""
        return {
            "run_id": run_id,
            "count": len(events),
            "types": [e.type for e in events],
            "steps": [e.step_index for e in events],
            "operations": [e.operation_id for e in events],
            "attempts": [e.attempt_id for e in events],
            "payloads": [json.dumps(e.payload, separators=(",", ":")) for e in events],
            "times": [e.created_at for e in events],
            "channel": self.notify_channel,
            "notice": notice,
        }

    def _last_offset(self, run_id: str) -> int:
        with self._pool.connection() as conn:
            found = conn.execute(self._q.last_offset, (run_id,)).fetchone()
        return int(found[0]) if found else 0

    def _listen(self) -> Listener | None:
        """The listener, started on first use (None once the store is closed)."""
        with self._lock:
            if self._listener is None and not self._closed:
                self._listener = Listener(
                    self._conninfo,
                    self.notify_channel,
                    self._notified,
                    self._wake_waiting,
                    name=f"nbdurable-listen:{self.schema}",
                )
            return self._listener

    def _notified(self, run_id: str) -> None:
        # An empty payload: a run id too long for a notification; wake every waiter.
        if run_id:
            notify(self, run_id)
        else:
            self._wake_waiting()

    def _wake_waiting(self) -> None:
        # After (re)connecting: commits made while nobody listened notified no one.
        with self._lock:
            waiting = builtins.list(self._waiting)
        for run_id in waiting:
            notify(self, run_id)

    @contextmanager
    def _transaction(
        self, conn: Connection[tuple[Any, ...]], begin: str = "BEGIN"
    ) -> Iterator[None]:
        # BEGIN and COMMIT are sent as statements in the pipeline (psycopg's
        # conn.transaction() waits for the server at both ends), so the whole
        # transaction costs one round trip; results are read after it.
        try:
            with conn.pipeline() if self._pipelined else nullcontext():
                conn.execute(begin)
                yield
                conn.execute("COMMIT")
        except BaseException:
            with suppress(Exception):  # a broken connection: the pool drops it
                conn.rollback()
            raise

    def _transact(self, work: Callable[[Connection[tuple[Any, ...]]], T], attempts: int = 5) -> T:
        # Saves and deletes take their locks in one order, so a deadlock or a
        # serialization failure should not happen; retry one anyway, since the
        # transaction rolled back whole.
        from psycopg.errors import TransactionRollback

        for attempt in range(attempts):
            try:
                with self._pool.connection() as conn:
                    return work(conn)
            except TransactionRollback:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover


def _added(run_id: str, events: Sequence[NewEvent], last: int) -> builtins.list[Event]:
    """The appended events with their offsets, the last one being ``last``.

    Built without validating again: the events were validated when they were made.
    """
    first = last - len(events) + 1
    return [
        Event.model_construct(
            run_id=run_id,
            offset=first + i,
            type=event.type,
            step_index=event.step_index,
            operation_id=event.operation_id,
            attempt_id=event.attempt_id,
            payload=event.payload,
            created_at=event.created_at,
        )
        for i, event in enumerate(events)
    ]


def _event(run_id: str, row: tuple[Any, ...]) -> Event:
    position, type_, step_index, operation_id, attempt_id, payload, created_at = row
    return Event(
        run_id=run_id,
        offset=position,
        type=type_,
        step_index=step_index,
        operation_id=operation_id,
        attempt_id=attempt_id,
        payload=json.loads(payload),
        created_at=created_at,
    )


def _notify_channel(schema: str) -> str:
    """``nbdurable_events:<schema>``, or a digest of the schema when that is too long."""
    channel = _CHANNEL_PREFIX + schema
    if len(channel.encode()) <= _MAX_IDENTIFIER:
        return channel
    return _CHANNEL_PREFIX + hashlib.sha256(schema.encode()).hexdigest()[:40]


@functools.lru_cache(maxsize=1)
def _pool_class(pool_module: Any) -> Any:
    """The pool the store uses: psycopg_pool's, waiting no longer than a store retry allows."""

    class Pool(pool_module.ConnectionPool):  # type: ignore[misc]
        def getconn(self, timeout: float | None = None) -> Any:
            # During an outage a call under a StoreRetry waits for a connection
            # only until the retry gives up, not the pool's whole timeout.
            # A call after the budget is spent still gets a short wait: a server
            # that is back is reconnected to within about 2 s.
            deadline = retry_deadline()
            if deadline is not None:
                left = max(deadline - time.monotonic(), 1.0)
                timeout = min(self.timeout if timeout is None else timeout, left)
            return super().getconn(timeout)

    return Pool


def _reconnect_failed(pool: Any) -> None:
    """Try again at once: ``check()`` grows an empty pool with a fresh attempt."""
    with suppress(Exception):  # a closed pool: nothing to do
        pool.check()


def _driver() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ConfigurationError(
            f"PostgresSessionStore needs the {_EXTRA} extra (pip install '{_EXTRA}'): {exc}"
        ) from exc
    return psycopg, psycopg_pool


def _split_schema(dsn: str) -> tuple[str, str | None]:
    """Take ``schema=`` out of a URL's query (libpq would refuse it)."""
    if dsn.partition("://")[0].lower() not in ("postgresql", "postgres"):
        return dsn, None
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    if not schemas:
        return dsn, None
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return urlunsplit(parts._replace(query=rest)), schemas[-1]


def _describe(psycopg: Any, conninfo: str) -> str:
    """``host:port/dbname`` of a DSN, without its password (for messages and repr)."""
    try:
        params: dict[str, Any] = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"invalid PostgreSQL DSN: {exc}") from exc
    host = params.get("host") or "localhost"
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{host}{port}/{params.get('dbname') or ''}"
