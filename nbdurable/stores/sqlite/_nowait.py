"""SQLite writes that run on the event loop's thread when nothing can make them wait.

A thread round trip costs more than a local SQLite commit, so
:func:`~nbdurable.durable._offload.offload` offers a store that declares
``local_nonblocking_writes`` each call of its own write methods first, on the
loop's thread (docs/stores.md, "Stores and the event loop"). The call runs only
in a mode that cannot wait: the store's lock taken without blocking, a second
connection whose busy timeout is zero, no fsync (``synchronous`` OFF or NORMAL),
and no WAL checkpoint: SQLite's automatic one is off, and :meth:`_checkpoint_wal`
runs a passive one on a store thread once the log has grown.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from ...durable._offload import WOULD_WAIT, NowaitCapable, WouldWait, in_background

__all__ = ["SqliteNowaitWrites"]

T = TypeVar("T")

# The write-ahead log is folded back into the file by a store thread once it
# holds this many bytes (SQLite's own automatic checkpoint would run inside a
# commit: on the event loop, with an fsync). Each fold copies and syncs the pages
# the log holds, and commits keep rewriting the same few pages (the last leaf of
# each table and index), so fewer, larger folds cost a run less: at 512 KB they
# cost a 500-step run a fifth of its time.
_CHECKPOINT_BYTES = 4 * 1024 * 1024
# Passive checkpoints run beside the writes and cannot restart a log that keeps
# growing under them; past this size the writes leave the loop's thread and a
# store thread folds the log back whole (TRUNCATE waits for the writers it blocks).
_WAL_CEILING = 2 * _CHECKPOINT_BYTES
# How long a fold waits for a passive checkpoint of this store in progress.
_FOLD_WAIT = 5.0
# Per store class: whether it overrides none of the methods run on the loop's thread.
_KEPT: dict[type, bool] = {}
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6


class SqliteNowaitWrites(NowaitCapable):
    """The SQLite store's calls on the loop's thread, and its WAL checkpoints."""

    path: str
    _conn: sqlite3.Connection
    _lock: Any
    nowait_methods: ClassVar[dict[str, Callable[..., Any]]] = {}
    """The methods ``try_without_waiting`` runs (set by the store class, guarded as they are)."""

    def _init_nowait(self, on_file: bool, synchronous: str) -> None:
        # Without fsync a commit is local memory-speed work: it may run on the
        # event loop's thread when nothing makes it wait.
        self._nonblocking = on_file and synchronous in ("OFF", "NORMAL")
        self._synchronous = synchronous
        self._nowait = False
        self.nowait_thread: int | None = None
        """The thread inside :meth:`run_without_waiting` (its calls never wait), or None."""
        # try_without_waiting's own connection: its busy timeout is zero for good.
        self._nowait_conn: sqlite3.Connection | None = None
        self._writes = 0
        self._wal = f"{self.path}-wal" if on_file else None
        self._checkpoint_at = _CHECKPOINT_BYTES
        self._checkpointing = False
        self._wal_full = False
        self._closed = False
        # A store thread's checkpoints run on a connection of their own, so the
        # store's lock (and the loop's writes) need not wait for one: WAL lets
        # writers append while a passive checkpoint copies and syncs.
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._checkpoint_lock = threading.Lock()
        self._flag_lock = threading.Lock()
        self._empty_next = False

    @property
    def local_nonblocking_writes(self) -> bool:
        """Whether writes may run on the loop's thread (a file, and no fsync per commit)."""
        return self._nonblocking

    def try_without_waiting(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` (a method of this store) now if it needs no wait; else ``WOULD_WAIT``.

        :func:`~nbdurable.durable._offload.offload` offers each call of a store
        declaring ``local_nonblocking_writes`` here first, on the event loop's
        thread. Only the methods in ``nowait_methods`` (``save``,
        ``save_with_events``, ``append_events`` and a runtime owner's record
        writes and one-row reads, as this class defines them: not a subclass's
        override) are run, and only in a mode that
        cannot wait: the connection's lock taken without blocking (another
        thread's call in progress: ``WOULD_WAIT``), the busy timeout at zero (a
        write lock held by another connection: SQLite's busy error, the
        transaction rolled back, ``WOULD_WAIT``), no fsync (``synchronous`` OFF
        or NORMAL only) and no WAL checkpoint (a store thread runs those). Any
        other error is raised as the method raises it from a store thread.
        """
        func = getattr(fn, "__func__", None)
        name = getattr(func, "__name__", "")
        if getattr(fn, "__self__", None) is not self or func is not self.nowait_methods.get(name):
            return WOULD_WAIT  # type: ignore[no-any-return]
        done: T = self.run_without_waiting(fn, *args, **kwargs)
        return done

    def run_without_waiting(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` here, none of its calls to this store able to wait; else ``WOULD_WAIT``.

        The store's lock is taken without blocking and held throughout (so
        this store's calls in ``fn`` run on the connection that never waits,
        and no other thread uses the store meanwhile). A call in ``fn`` that
        meets a busy or other transient failure rolls back what it began and
        raises :class:`~nbdurable.durable._offload.WouldWait` out of ``fn``
        (past any retry loop in it): the result is then ``WOULD_WAIT``, and
        the caller runs ``fn`` again on a store thread. ``fn`` must therefore
        make only this store's calls and be safe to run again from the start
        (see :func:`~nbdurable.durable._offload.run_without_waiting`).
        """
        if (
            not self.local_nonblocking_writes
            or not self._own_methods()
            or not self._lock.acquire(blocking=False)
        ):
            return WOULD_WAIT  # type: ignore[no-any-return]
        try:
            if self._closed or self._nowait or self._conn.in_transaction or self._wal_full:
                return WOULD_WAIT  # type: ignore[no-any-return]
            # The method runs on the connection that never waits; the lock keeps
            # every other user of self._conn out meanwhile.
            assert self._nowait_conn is not None  # opened with local_nonblocking_writes
            own, self._conn = self._conn, self._nowait_conn
            self._nowait = True
            self.nowait_thread = threading.get_ident()
            try:
                return fn(*args, **kwargs)
            except WouldWait:
                return WOULD_WAIT  # type: ignore[no-any-return]
            except sqlite3.OperationalError as exc:
                if _busy(exc) and not self._conn.in_transaction:
                    return WOULD_WAIT  # type: ignore[no-any-return]
                raise
            finally:
                if self._conn.in_transaction:  # a call that raised left its transaction open
                    self._conn.execute("ROLLBACK")
                self.nowait_thread = None
                self._nowait = False
                self._conn = own
        finally:
            self._lock.release()

    def _own_methods(self) -> bool:
        """Whether this object's class keeps every method of ``nowait_methods`` as defined.

        Objects in front of the store call those methods inside
        :meth:`run_without_waiting`: a subclass's override (what it does is
        unknown) would run on the loop's thread, so then nothing does.
        """
        cls = type(self)
        kept = _KEPT.get(cls)
        if kept is None:
            kept = _KEPT[cls] = all(
                getattr(cls, name, None) is method for name, method in self.nowait_methods.items()
            )
        return kept

    def _open_nowait_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA journal_size_limit = 262144")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        except BaseException:
            conn.close()
            raise
        return conn

    def _checkpoint_wal(self, *, force: bool = False) -> None:
        """Fold the write-ahead log into the file once it grew large (``force``: now).

        Called with the lock held, after a commit. On the event loop's thread
        (``_nowait``) the checkpoint is handed to a store thread: it writes and
        syncs the database file.
        """
        if self._wal is None:
            return
        if self._wal_full and not self._nowait:
            self._truncate_checkpoint()
            return
        if self._checkpointing and (not force or self._empty_after_this_one()):
            return
        if not force:
            self._writes += 1
            if self._writes % 4:
                return  # a commit adds a few pages: the size is looked at every 4th
            size = self._wal_size()
            if size >= _WAL_CEILING:
                self._wal_full = True
                if not self._nowait:
                    self._truncate_checkpoint()
                    return
            if size < self._checkpoint_at:
                return
        if not self._nowait:
            self._run_checkpoint()
            return
        self._checkpointing = True
        try:
            in_background(lambda: self._background_checkpoint(empty=force))
        except RuntimeError:  # the interpreter is exiting: the last close folds the log
            self._checkpointing = False

    def _background_checkpoint(self, empty: bool = False) -> None:
        """On a store thread: a passive checkpoint, or with ``empty`` a ``TRUNCATE``.

        A run that stops or ends asks for ``empty``: the log is emptied when
        nothing else uses it right then. The connection's busy timeout is zero,
        so neither mode waits: a ``TRUNCATE`` that meets a writer or a reader
        folds what it can, as a passive one does, and leaves the log as it is.
        """
        with self._checkpoint_lock:
            try:
                while not self._closed:
                    if self._checkpoint_conn is None:
                        self._checkpoint_conn = self._open_nowait_connection()
                    if empty:
                        # Copy the pages first without the write lock, which a
                        # TRUNCATE holds from its start: the loop's writes then
                        # wait for it only while it empties the log.
                        self._run_checkpoint(self._checkpoint_conn, "PASSIVE")
                    self._run_checkpoint(self._checkpoint_conn, "TRUNCATE" if empty else "PASSIVE")
                    # A run that stopped meanwhile asked for the log to be emptied.
                    with self._flag_lock:
                        empty, self._empty_next = self._empty_next, False
                        if not empty:
                            self._checkpointing = False
                            return
            except sqlite3.Error:
                return  # the next commit tries again; a failing file fails the writes themselves
            finally:
                self._checkpointing = False

    def _empty_after_this_one(self) -> bool:
        """Ask the checkpoint in progress to empty the log after it; False if it has ended."""
        with self._flag_lock:  # held by either thread only to read and set two flags
            if self._checkpointing:
                self._empty_next = True
                return True
        return False

    def _truncate_checkpoint(self) -> None:
        """On a store thread, lock held: fold the whole log back and empty it."""
        # A checkpoint of another connection makes this one fail at once (busy),
        # and every write would leave the loop until it ends: wait for ours (not
        # for ever: a busy fold is tried again at the next write).
        waited = self._checkpoint_lock.acquire(timeout=_FOLD_WAIT)
        try:
            busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error:
            return  # the next write tries again; a failing file fails the writes themselves
        finally:
            if waited:
                self._checkpoint_lock.release()
        if not busy:
            self._wal_full = False
            self._checkpoint_at = _CHECKPOINT_BYTES

    def _close_checkpoints(self) -> None:
        """Close the store threads' checkpoint connection (after any checkpoint in progress)."""
        with self._checkpoint_lock:
            if self._checkpoint_conn is not None:
                self._checkpoint_conn.close()
                self._checkpoint_conn = None

    def _run_checkpoint(
        self, conn: sqlite3.Connection | None = None, mode: str = "PASSIVE"
    ) -> None:
        """A ``PASSIVE`` (or ``TRUNCATE``) checkpoint on ``conn``; sets when the next one is due."""
        before = self._wal_size()
        try:
            busy, log, done = (
                (conn or self._conn).execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
            )
        except sqlite3.Error:
            return  # the next commit tries again; a failing file fails the writes themselves
        # A log that was not folded whole (a reader kept frames in it), or that
        # commits appended to meanwhile (the loop's writes go on during a store
        # thread's checkpoint), is not restarted by the next write: it is not
        # tried again until it grew by as much once more (or reached the ceiling),
        # rather than at every 4th commit, each time with two syncs.
        self._checkpoint_at = _CHECKPOINT_BYTES
        after = self._wal_size()
        if busy or (log >= 0 and done < log) or after > before:
            self._checkpoint_at += after

    def _wal_size(self) -> int:
        try:
            return os.stat(self._wal).st_size if self._wal else 0
        except OSError:
            return 0


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(exc)
