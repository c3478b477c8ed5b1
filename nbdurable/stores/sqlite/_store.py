"""The embedded default store: one SQLite file, full history, linear storage.

A thin composition of its parts, each holding the file's one connection
(:class:`~._db.SqliteDb`): checkpoints (:mod:`._checkpoints`), run records
(:mod:`._runs`) and the event log (:mod:`._events`). The schema lives in
:mod:`._schema`.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..._errors import RunNotFoundError
from ...durable._offload import WOULD_WAIT, NowaitCapable
from ...durable.store import Capability
from ...events._model import Event, NewEvent
from .._composed import ComposedStore
from ._checkpoints import SqliteCheckpoints
from ._db import SqliteDb
from ._errors import guard_methods
from ._events import KNOWN_RUN, LAST_EVENT, append_events, decode_events, fetch_events
from ._heads import read_head
from ._runs import SqliteRunRecords
from ._schema import SCHEMA_VERSION

__all__ = ["SqliteSessionStore"]

T = TypeVar("T")

_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
# Per store class: whether it overrides none of the methods run on the loop's thread.
_KEPT: dict[type, bool] = {}


class SqliteSessionStore(NowaitCapable, ComposedStore):
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
        self._db = SqliteDb(self.path, busy_timeout, synchronous.upper())
        self.run_records: SqliteRunRecords = SqliteRunRecords(self._db)
        self.checkpoints: SqliteCheckpoints = SqliteCheckpoints(self._db, self.run_records)

    nowait_methods: ClassVar[dict[str, Callable[..., Any]]] = {}
    """The methods ``try_without_waiting`` runs (set below, guarded as they are)."""

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
    def local_nonblocking_writes(self) -> bool:
        """Whether writes may run on the loop's thread (a file, and no fsync per commit)."""
        return self._db.nonblocking

    def try_without_waiting(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` (a method of this store) now if it needs no wait; else ``WOULD_WAIT``.

        :func:`~nbdurable.durable._offload.offload` offers each call of a store
        declaring ``local_nonblocking_writes`` here first, on the event loop's
        thread. Only the methods in ``nowait_methods`` (``save``,
        ``save_with_events``, ``append_events`` and a runtime owner's record
        writes and one-row reads, as this class defines them: not a subclass's
        override) are run, and only in a mode that cannot wait
        (:meth:`~._db.SqliteDb.run_without_waiting`). Any other error is raised
        as the method raises it from a store thread.
        """
        func = getattr(fn, "__func__", None)
        name = getattr(func, "__name__", "")
        if getattr(fn, "__self__", None) is not self or func is not self.nowait_methods.get(name):
            return WOULD_WAIT  # type: ignore[no-any-return]
        done: T = self.run_without_waiting(fn, *args, **kwargs)
        return done

    def run_without_waiting(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` here, none of its calls to this store able to wait; else ``WOULD_WAIT``.

        See :meth:`~._db.SqliteDb.run_without_waiting`. A subclass that
        overrides one of ``nowait_methods`` (what it does is unknown) runs
        nothing here.
        """
        cls = type(self)
        kept = _KEPT.get(cls)
        if kept is None:
            kept = _KEPT[cls] = all(
                getattr(cls, name, None) is method for name, method in self.nowait_methods.items()
            )
        if not kept:
            return WOULD_WAIT  # type: ignore[no-any-return]
        return self._db.run_without_waiting(fn, *args, **kwargs)

    def append_events(
        self, run_id: str, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> Sequence[Event]:
        """Append events in one transaction; offsets continue from the run's last one."""
        if not events:
            return []
        with self._db.lock, self._db.write() as conn:
            if fence is not None:
                self.run_records.rt_check_fence(run_id, fence, conn)
            return append_events(conn, run_id, events)

    def read_events(
        self, run_id: str, after: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        """Events with offset > ``after``, in order.

        Raises:
            RunNotFoundError: The file has no checkpoint and no event of the run.
            StoreCorruptionError: An event's payload is not JSON.
        """
        with self._db.lock, self._db.read() as conn:
            rows = fetch_events(conn, run_id, after, limit)
            unknown = not rows.legacy and not rows.batches and rows.last == 0 and not rows.head
            if unknown and not conn.execute(KNOWN_RUN, (run_id,)).fetchone()[0]:
                raise RunNotFoundError(run_id)
        return decode_events(run_id, after, limit, rows, self._db.legacy)

    def last_event_offset(self, run_id: str) -> int:
        """The run's last event offset as its head row says (0 without events).

        Raises:
            StoreCorruptionError: The head row is damaged.
        """
        with self._db.lock, self._db.read() as conn:
            head = read_head(conn, run_id)
            if head is not None:
                return head.events
            return int(conn.execute(LAST_EVENT, (run_id,)).fetchone()[0] or 0)

    def reclaim_space(self) -> str:
        """``VACUUM``: rewrite the database without its free pages; says how it shrank."""
        conn = self._db.conn

        def size() -> int:
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            (page_size,) = conn.execute("PRAGMA page_size").fetchone()
            return int(pages) * int(page_size)

        with self._db.lock:
            before = size()
            self._db.retry_locked(lambda: conn.execute("VACUUM"))
            after = size()
        return f"VACUUM: {before:,} bytes -> {after:,} bytes"

    def close(self) -> None:
        """Close the connections."""
        self._db.close()

    def __repr__(self) -> str:
        return f"SqliteSessionStore({self.path!r})"


guard_methods(SqliteSessionStore)
guard_methods(SqliteRunRecords)
guard_methods(SqliteCheckpoints)
# A runtime owner's writes, a submission and one-row reads are short transactions too; bulk
# reads (lists, loads that decode a long history, a long session) stay on store threads:
# ``load`` and ``rt_session`` send those there themselves (WouldWait).
SqliteSessionStore.nowait_methods = {
    name: getattr(SqliteSessionStore, name)
    for name in (
        "save",
        "save_with_events",
        "append_events",
        "rt_get",
        "rt_insert",
        "rt_update",
        "rt_change",
        "rt_verdict",
        "rt_claim_notices",
        "rt_grants",
        "rt_late_result",
        "rt_claim",
        "rt_claim_many",
        "rt_renew",
        "rt_intent",
        "rt_commit",
        "rt_intents",
        "rt_journal",
        "rt_journaled",
        "load",
        "rt_session",
    )
}
