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
from contextlib import nullcontext, suppress
from typing import TYPE_CHECKING, Any, ClassVar

from ..._errors import RunNotFoundError, StoreCorruptionError
from ...durable._offload import offload
from ...durable.store import (
    Armed,
    Capability,
    PruneReport,
    check_commit,
    notify,
    notify_all,
    prune_runs,
)
from ...durable.store import wait_for_events as wait_locally
from ...events._model import Event, NewEvent
from ...runs import RunPatch, RuntimeRun, ToolIntent
from .._composed import ComposedStore
from ._checkpoints import PostgresCheckpoints
from ._connect import DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT
from ._db import PostgresDb
from ._listen import Listener
from ._runs import PostgresRunRecords
from ._schema import SCHEMA_VERSION
from ._sql import added_events, event_from_row, event_params

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresSessionStore"]


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


class PostgresSessionStore(ComposedStore):
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
            A URL may carry ``?schema=name`` and ``?pool_max=N`` (``max_size``), which
            this store reads and libpq never sees.
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
        self._db = db = PostgresDb(
            dsn, schema, (min_size, max_size), timeout, idle_in_transaction_timeout, pool_kwargs
        )
        self.schema: str = db.schema
        """The PostgreSQL schema holding the store's tables."""
        self.notify_channel: str = db.notify_channel
        """The channel every append notifies (payload: the run id), per schema."""
        self.work_channel: str = db.work_channel
        """The channel writes that make a run claimable notify (payload: its kind), per schema."""
        self.run_records: PostgresRunRecords = PostgresRunRecords(db)
        self.checkpoints: PostgresCheckpoints = PostgresCheckpoints(db, self.run_records)
        self._lock = threading.Lock()
        self._listener: Listener | None = None
        self._waiting: Counter[str] = Counter()  # run ids subscribers wait on
        self._work_watchers: builtins.list[Callable[[str], None]] = []
        self._closed = False

    @property
    def pool(self) -> ConnectionPool[Connection[tuple[Any, ...]]]:
        """The connection pool (its ``get_stats()`` tells how connections are used)."""
        return self._db.pool

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
        self._db.pool.check()

    @property
    def schema_version(self) -> int:
        """The schema version this store writes (the database's, after migrations)."""
        return SCHEMA_VERSION

    @property
    def event_channel(self) -> str:
        """Identifies this database and schema's event log for in-process subscribers."""
        return f"{self._db.where}?schema={self.schema}"

    def append_events(
        self, run_id: str, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> builtins.list[Event]:
        """Append events in one transaction (one round trip); offsets continue from the last one.

        ``fence``: refused when stale, as in :meth:`save_with_events`.
        """
        if not events:
            return []
        batch = event_params(run_id, events, self.notify_channel)

        def append(conn: Connection[tuple[Any, ...]]) -> int:
            with self._db.transaction(conn):
                if fence is not None:
                    self.run_records.rt_check_fence(run_id, fence, conn)
                found = conn.execute(self._db.q.append_events, batch)
            row = found.fetchone()
            assert row is not None  # the upsert always returns the run's counter
            return int(row[0])

        return added_events(run_id, events, self._db.transact(append))

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
        batch = event_params(run_id, events, self.notify_channel) if events else None

        def commit(conn: Connection[tuple[Any, ...]]) -> tuple[int, RuntimeRun | None]:
            last = 0
            with self._db.transaction(conn):
                record = self.run_records.combined(conn, run_id, fence, journal, changes, intents)
                if batch is not None:
                    found = conn.execute(self._db.q.append_events, batch)
            if batch is not None:
                row = found.fetchone()
                assert row is not None  # the upsert always returns the run's counter
                last = int(row[0])
            return last, record

        last, record = self._db.transact(commit)
        return (added_events(run_id, events, last) if events else []), record

    def read_events(
        self, run_id: str, after: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        """Events with offset > ``after``, in order (one round trip).

        Raises:
            RunNotFoundError: The store has no checkpoint and no event of the run.
            StoreCorruptionError: An event's payload is not JSON.
        """
        with self._db.pool.connection() as conn:
            with conn.pipeline() if self._db.pipelined else nullcontext():
                found = conn.execute(self._db.q.read_events, (run_id, after, limit))
                known = conn.execute(self._db.q.known_run, {"run_id": run_id})
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

    def watch_work(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(kind)`` whenever a write may have made a run claimable; returns unwatch.

        A submission, a verdict, a release, a retry wait or a finish that
        promotes the next run notifies :attr:`work_channel` at commit, from any
        process; the store's listener (one connection, shared with
        :meth:`wait_for_events`) calls ``callback`` on its thread, with the
        run's kind (``agent`` or ``task``), or ``""`` after (re)connecting
        (notifications sent meanwhile reached no one). Idle workers wait on
        this and poll only as a fallback (:meth:`notifies_work`).
        """
        with self._lock:
            self._work_watchers.append(callback)
        self._listen()

        def unwatch() -> None:
            with self._lock, suppress(ValueError):
                self._work_watchers.remove(callback)

        return unwatch

    def notifies_work(self) -> bool:
        """Whether the listener is in place, so :meth:`watch_work`'s callbacks are called now."""
        listener = self._listener
        return listener is not None and listener.ready

    def prune(self, finished_before: int, *, dry_run: bool = False) -> PruneReport:
        """Delete the runs finished before ``finished_before`` (``HistoryStore.prune``).

        Set-based: the runs go :data:`~._checkpoints.DELETE_BATCH` at a time, a
        few statements per batch (not a round trip per run), then
        :meth:`reclaim_space` vacuums the tables.
        """
        return prune_runs(
            self,
            finished_before,
            dry_run=dry_run,
            reclaim=self.reclaim_space,
            delete_many=self.checkpoints.delete_many,
        )

    def reclaim_space(self) -> str:
        """``VACUUM (ANALYZE)`` the store's tables; what it gave back, as PostgreSQL counts it.

        VACUUM makes the deleted rows' space reusable and returns the empty
        pages at a table's end to the disk; it takes no lock that stops reads
        or writes. VACUUM FULL would give the rest back, under an exclusive lock.
        """
        with self._db.pool.connection() as conn:  # autocommit: VACUUM runs outside a transaction
            before = self._table_bytes(conn)
            for statement in self._db.q.vacuum:
                conn.execute(statement)
            after = self._table_bytes(conn)
        return (
            f"VACUUM: the tables take {_megabytes(before)} -> {_megabytes(after)} on disk; "
            "the rest of the deleted rows' space is reusable "
            "(VACUUM FULL gives it back to the disk, under an exclusive lock)"
        )

    def _table_bytes(self, conn: Connection[tuple[Any, ...]]) -> int:
        found = conn.execute(self._db.q.table_bytes, (self.schema,)).fetchone()
        return int(found[0]) if found else 0

    def close(self) -> None:
        """Stop the listener, close the pool and their connections."""
        with self._lock:
            self._closed = True
            listener, self._listener = self._listener, None
        if listener is not None:  # 1 s: a daemon thread, one still connecting ends on its own
            listener.stop(timeout=1.0)
        self._db.pool.close(timeout=1.0)  # for each of its threads (daemons too)

    def __repr__(self) -> str:
        return f"PostgresSessionStore({self._db.where!r}, schema={self.schema!r})"

    def last_event_offset(self, run_id: str) -> int:
        """The run's last event offset as its ``event_heads`` row says (0 without events)."""
        return self._last_offset(run_id)

    def _last_offset(self, run_id: str) -> int:
        with self._db.pool.connection() as conn:
            found = conn.execute(self._db.q.last_offset, (run_id,)).fetchone()
        return int(found[0]) if found else 0

    def _listen(self) -> Listener | None:
        """The listener, started on first use (None once the store is closed)."""
        with self._lock:
            if self._listener is None and not self._closed:
                self._listener = Listener(
                    self._db.conninfo,
                    self.notify_channel,
                    self._notified,
                    self._wake_waiting,
                    name=f"nbdurable-listen:{self.schema}",
                    more={self.work_channel: self._work_notified},
                )
            return self._listener

    def _notified(self, run_id: str) -> None:
        # An empty payload: a run id too long for a notification; wake every waiter.
        if run_id:
            notify(self, run_id)
        else:
            self._wake_waiting()

    def _work_notified(self, kind: str) -> None:
        with self._lock:
            watchers = builtins.list(self._work_watchers)
        for callback in watchers:
            callback(kind)

    def _wake_waiting(self) -> None:
        # After (re)connecting: commits made while nobody listened notified no one.
        with self._lock:
            waiting = builtins.list(self._waiting)
        for run_id in waiting:
            notify(self, run_id)
        notify_all(self)
        self._work_notified("")
