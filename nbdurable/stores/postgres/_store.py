"""A PostgreSQL store: the SQLite store's model on a shared server, through a connection pool.

Messages are stored once, as a content-addressed chain (see :mod:`..chain`, the
same node ids as the SQLite store); a checkpoint row holds only metadata and the
id of its last message node. A save writes the nodes it adds plus one row, in
one transaction, so its cost does not grow with the history. The schema lives
in :mod:`._schema`, the statements in :mod:`._sql`, the
connection handling (driver, DSN, pool, transactions) in :mod:`._connect`.

The store keeps each run's event log too: an append takes its offsets from a
per-run counter row in the writing transaction and sends ``NOTIFY`` on the
store's channel before it commits, so a subscriber in another process is woken
at once (:meth:`PostgresSessionStore.wait_for_events`, see :mod:`._listen`).

psycopg is imported when a store is created, not when this module is: the
class can be named (``from nbdurable import *``) without the extra installed.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ..._errors import ConfigurationError, RunNotFoundError, StoreCorruptionError
from ...durable._checkpoint import AgentCheckpoint, CheckpointInfo
from ...durable._offload import offload
from ...durable._records import RunRecord
from ...durable.store import (
    Armed,
    Capability,
    EventLog,
    HistoryStore,
    RunStore,
    check_commit,
    notify,
    notify_all,
)
from ...durable.store import wait_for_events as wait_locally
from ...events._model import Event, NewEvent
from ...messages import Message
from ...runs import RunPatch, RuntimeRun, ToolIntent
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
from ._connect import (
    DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT,
    describe,
    driver,
    limit_idle_transactions,
    notify_channel,
    open_pool,
    split_schema,
    transact,
    transaction,
)
from ._listen import Listener
from ._runs import PostgresRuntimeTables
from ._schema import SCHEMA_VERSION, advisory_key, migrate
from ._sql import Statements, added_events, event_from_row, event_params

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresSessionStore"]

T = TypeVar("T")


class PostgresSessionStore(PostgresRuntimeTables, HistoryStore, RunStore, EventLog):
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
    :mod:`._runs`): several runtimes or workers, in any process or
    host, may share one database; ``fence=`` on :meth:`save_with_events` and
    :meth:`append_events` is checked in the write's transaction.

    Args:
        dsn: A libpq connection string or URL (``postgresql://user@host:5432/db``).
            A URL may carry ``?schema=name``, which this store reads and libpq never sees.
        schema: The PostgreSQL schema holding the tables (default ``"nbdurable"``).
        min_size: Connections the pool keeps open.
        max_size: Most connections the pool opens; more concurrent calls wait.
        timeout: Seconds a call waits for a free connection before failing.
        idle_in_transaction_timeout: The sessions' ``idle_in_transaction_session_timeout``,
            in seconds: a process paused mid-transaction holds its locks this long
            at most. Set where the session's own is off; ``None`` leaves it as is.
        pool_kwargs: More ``psycopg_pool.ConnectionPool`` arguments
            (``max_idle``, ``check``, ``configure``, ...).

    Raises:
        ConfigurationError: The ``nbdurable[postgres]`` extra is not installed,
            or ``schema`` is given twice with different values.
        CheckpointVersionError: The database's schema is newer than this nbdurable.
        psycopg.OperationalError: The server cannot be reached.
    """

    # Every capability there is (a new one must be proven here before it is added).
    capabilities: ClassVar[frozenset[Capability]] = frozenset(Capability)

    def __init__(
        self,
        dsn: str,
        *,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        idle_in_transaction_timeout: float | None = DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT,
        pool_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        psycopg, pool_module = driver()
        configure = limit_idle_transactions(
            idle_in_transaction_timeout, (pool_kwargs or {}).get("configure")
        )
        conninfo, from_url = split_schema(dsn)
        if schema is not None and from_url is not None and schema != from_url:
            raise ConfigurationError(
                f"schema given twice: {schema!r} as an argument, {from_url!r} in the URL"
            )
        chosen = schema if schema is not None else from_url
        self.schema: str = "nbdurable" if chosen is None else chosen
        """The PostgreSQL schema holding the store's tables."""
        self._q = Statements.for_schema(self.schema)
        self._gc_key = advisory_key("gc", self.schema)
        self._where = describe(psycopg, conninfo)
        self.notify_channel: str = notify_channel(self.schema)
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
        self._pool: ConnectionPool[Connection[tuple[Any, ...]]] = open_pool(
            pool_module,
            conninfo,
            name=f"nbdurable:{self.schema}",
            sizes=(min_size, max_size),
            timeout=timeout,
            configure=configure,
            pool_kwargs=pool_kwargs,
        )

    @property
    def pool(self) -> ConnectionPool[Connection[tuple[Any, ...]]]:
        """The connection pool (its ``get_stats()`` tells how connections are used)."""
        return self._pool

    def recover_connections(self, error: BaseException | None = None) -> None:
        """Drop the pooled connections a lost server broke; the pool opens new ones.

        After a server restart every idle connection in the pool is dead, and
        each would fail one call before the pool noticed. Retries
        (:class:`~nbdurable.durable._transient.StoreRetry`) call this after a
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
    ) -> builtins.list[Event]:
        """Store a checkpoint and append events to its run's log in one transaction.

        With ``fence`` (a runtime owner's token) the write is refused with
        :class:`~nbdurable.FencedOutError` when another runtime owns the run now,
        checked in the same transaction; ``extends`` is as in :meth:`save`.
        """
        return self._save(checkpoint, events, fence, extends=extends)

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

        return added_events(run_id, events, self._transact(append))

    def rt_commit(
        self,
        run_id: str,
        *,
        fence: int,
        events: Sequence[NewEvent] = (),
        journal: tuple[int, str] | None = None,
        changes: RunPatch | None = None,
        intents: Sequence[ToolIntent] = (),
    ) -> tuple[builtins.list[Event], RuntimeRun | None]:
        """Several writes of a run's owner in one fenced transaction (``RunStore.rt_commit``)."""
        check_commit(changes)
        batch = self._batch(run_id, events) if events else None

        def commit(conn: Connection[tuple[Any, ...]]) -> tuple[int, RuntimeRun | None]:
            last = 0
            with self._transaction(conn):
                record = self._rt_combined(conn, run_id, fence, journal, changes, intents)
                if batch is not None:
                    found = conn.execute(self._q.append_events, batch)
            if batch is not None:
                row = found.fetchone()
                assert row is not None  # the upsert always returns the run's counter
                last = int(row[0])
            return last, record

        last, record = self._transact(commit)
        return (added_events(run_id, events, last) if events else []), record

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
            return [event_from_row(run_id, row) for row in rows]
        except ValueError as exc:
            raise StoreCorruptionError(
                f"an event of run {run_id!r} is damaged: {exc}", run_id=run_id
            ) from exc

    async def wait_for_events(
        self, run_id: str, timeout: float, *, after: int | None = None, armed: Armed | None = None
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
            armed: The hub's wake-up the caller registered; this wait registers its own.
        """
        if armed is not None:
            armed.disarm()
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
                if await offload(self._last_offset, run_id) <= after:  # a later append wakes it
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
            # grown() copies the ids unless the cached chain is still this run's latest.
            latest = self._chains.get(run_id) is cached and cached is not None
            grown = cached.grown(known, messages, new_ids) if latest and cached else None
            if grown is None:
                ids = [*cached.ids[:known]] if cached is not None else []
                grown = Chain(messages, [*ids, *new_ids])
            self._chains.put(run_id, grown)
        return added_events(run_id, events, last) if events else []

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
            [text for _, _, text in nodes],
            run_id=run_id,
            step_index=row.step_index,
            verified=True,  # verify_chain checked every node's hash
        )
        with self._lock:
            self._chains.put(run_id, Chain(messages, [nid for nid, _, _ in nodes]))
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

    def reclaim_space(self) -> str:
        """What happens to the deleted rows' space (nothing to run here)."""
        # VACUUM cannot run in the pool's transactions; autovacuum gets to the
        # deleted rows on its own, and VACUUM FULL would lock the tables.
        return (
            "rows deleted; autovacuum makes their space reusable "
            "(VACUUM FULL gives it back to the disk, under an exclusive lock)"
        )

    def close(self) -> None:
        """Stop the listener, close the pool and their connections."""
        with self._lock:
            self._closed = True
            listener, self._listener = self._listener, None
        if listener is not None:  # 1 s: a daemon thread, one still connecting ends on its own
            listener.stop(timeout=1.0)
        self._pool.close(timeout=1.0)  # for each of its threads (daemons too)

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
        return event_params(run_id, events, self.notify_channel)

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
        notify_all(self)

    def _transaction(
        self, conn: Connection[tuple[Any, ...]], begin: str = "BEGIN"
    ) -> AbstractContextManager[None]:
        return transaction(conn, pipelined=self._pipelined, begin=begin)

    def _transact(self, work: Callable[[Connection[tuple[Any, ...]]], T], attempts: int = 5) -> T:
        return transact(self._pool, work, attempts)
