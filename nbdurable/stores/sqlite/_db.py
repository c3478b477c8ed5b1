"""The SQLite store's connection: its transactions, the calls that never wait, WAL folds.

Every part of the store (checkpoints, run records, the event log) holds the one
:class:`SqliteDb` of its file and reads :attr:`SqliteDb.conn` at each call.

A thread round trip costs more than a local SQLite commit, so
:func:`~nbdurable.durable._offload.offload` offers a store that declares
``local_nonblocking_writes`` each call of its own write methods first, on the
loop's thread (docs/stores.md, "Stores and the event loop"). The call runs only
in a mode that cannot wait (:meth:`SqliteDb.run_without_waiting`): the lock
taken without blocking, a second connection whose busy timeout is zero, no fsync
(``synchronous`` OFF or NORMAL), and no WAL checkpoint: SQLite's automatic one
is off, and :meth:`SqliteDb.checkpoint_wal` runs a passive one on a store thread
once the log has grown.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ...durable._offload import WOULD_WAIT, WouldWait, in_background
from ._errors import typed_error
from ._schema import legacy_rows, migrate, verify_schema

__all__ = ["SqliteDb"]

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
# The pauses of a fold that empties the log while others write (doubling up to the last).
_QUIET_FIRST = 0.05
_QUIET_MAX = 1.0
# Rows (records, messages) a read on the event loop's thread verifies and decodes at most.
NOWAIT_ROWS = 32
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_PAGE_SIZE = 2048


class SqliteDb:
    """One SQLite file's connection, shared by the store's parts (thread-safe behind ``lock``).

    Args:
        path: The database file, or ``":memory:"``.
        busy_timeout: Seconds a writer waits for another process's transaction.
        synchronous: SQLite's ``synchronous`` setting, upper case.
    """

    def __init__(self, path: str, busy_timeout: float, synchronous: str) -> None:
        on_file = path != ":memory:"
        self.path = path
        self.busy_timeout = busy_timeout
        self.synchronous = synchronous
        self.lock = threading.RLock()
        # Without fsync a commit is local memory-speed work: it may run on the
        # event loop's thread when nothing makes it wait.
        self.nonblocking = on_file and synchronous in ("OFF", "NORMAL")
        self.nowait = False
        self.nowait_thread: int | None = None
        """The thread inside :meth:`run_without_waiting` (its calls never wait), or None."""
        # run_without_waiting's own connection: its busy timeout is zero for good.
        self.nowait_conn: sqlite3.Connection | None = None
        self.closed = False
        self._writes = 0
        self._wal = f"{path}-wal" if on_file else None
        self._checkpoint_at = _CHECKPOINT_BYTES
        self._checkpointing = False
        self._wal_full = False
        # A store thread's checkpoints run on a connection of their own, so the
        # lock (and the loop's writes) need not wait for one: WAL lets writers
        # append while a passive checkpoint copies and syncs.
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._checkpoint_lock = threading.Lock()
        self._flag_lock = threading.Lock()
        self._empty_next = False
        self.conn = sqlite3.connect(
            path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            # A new file gets 2 KB pages (an existing one keeps its own): a step's
            # rows touch a dozen pages, and every commit copies each whole page
            # into the write-ahead log, then a checkpoint copies it again.
            self.conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
            # Switching a new file to WAL takes a lock the busy handler does not
            # always wait for, so several processes opening one new file retry.
            self.retry_locked(lambda: self.conn.execute("PRAGMA journal_mode = WAL").fetchone())
            self.conn.execute(f"PRAGMA synchronous = {synchronous}")
            # After a checkpoint the WAL is cut back to this size instead of staying
            # at its high-water mark (SQLite's default keeps ~4 MB around forever).
            self.conn.execute("PRAGMA journal_size_limit = 262144")
            # WAL checkpoints never run inside a commit (see checkpoint_wal).
            self.conn.execute("PRAGMA wal_autocheckpoint = 0")
            self.retry_locked(lambda: migrate(self.conn, path))
            verify_schema(self.conn, path)
            self.legacy = legacy_rows(self.conn, path)
            """The file holds rows older than checksums (see ``_crc.verify_row``)."""
            if self.nonblocking:
                self.nowait_conn = self._open_nowait_connection()
        except BaseException as exc:
            self.conn.close()
            known = isinstance(exc, (sqlite3.Error, UnicodeDecodeError))
            typed = typed_error(exc, path) if known and isinstance(exc, Exception) else None
            if typed is not None:
                raise typed from exc
            raise

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction (the lock held by the caller), then maybe a fold."""
        # IMMEDIATE takes the write lock up front, so the busy timeout applies
        # to it; a deferred transaction that upgrades to a write can fail with
        # "database is locked" without waiting.
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self.checkpoint_wal()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One snapshot (the lock held by the caller): the transaction in progress, or a new one."""
        # One snapshot for rows and what checks them (a checkpoint row and its
        # chain, records and the count of another index): a commit in between
        # must not look like damage.
        conn = self.conn
        begun = not conn.in_transaction
        if begun:
            conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if begun and conn.in_transaction:
                conn.execute("COMMIT")

    def retry_locked(self, action: Callable[[], T]) -> T:
        """``action()``, again while SQLite says the file is locked, up to the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def run_without_waiting(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` here, none of its calls to this file able to wait; else ``WOULD_WAIT``.

        The lock is taken without blocking and held throughout, and :attr:`conn`
        is the connection that never waits meanwhile (no other thread uses the
        file then). A call in ``fn`` that meets a busy or other transient
        failure rolls back what it began and raises
        :class:`~nbdurable.durable._offload.WouldWait` out of ``fn`` (past any
        retry loop in it): the result is then ``WOULD_WAIT``, and the caller
        runs ``fn`` again on a store thread. ``fn`` must therefore make only
        this store's calls and be safe to run again from the start (see
        :func:`~nbdurable.durable._offload.run_without_waiting`).
        """
        if not self.nonblocking or not self.lock.acquire(blocking=False):
            return WOULD_WAIT  # type: ignore[no-any-return]
        try:
            if self.closed or self.nowait or self.conn.in_transaction or self._wal_full:
                return WOULD_WAIT  # type: ignore[no-any-return]
            assert self.nowait_conn is not None  # opened with nonblocking
            own, self.conn = self.conn, self.nowait_conn
            self.nowait = True
            self.nowait_thread = threading.get_ident()
            try:
                return fn(*args, **kwargs)
            except WouldWait:
                return WOULD_WAIT  # type: ignore[no-any-return]
            except sqlite3.OperationalError as exc:
                if _busy(exc) and not self.conn.in_transaction:
                    return WOULD_WAIT  # type: ignore[no-any-return]
                raise
            finally:
                if self.conn.in_transaction:  # a call that raised left its transaction open
                    self.conn.execute("ROLLBACK")
                self.nowait_thread = None
                self.nowait = False
                self.conn = own
        finally:
            self.lock.release()

    def few_here(self, rows: int | None) -> None:
        """In a call on the loop's thread, send one that reads more than :data:`NOWAIT_ROWS` away.

        A read method that the store runs on the event loop's thread (a run's
        start and ``Run.result()`` load its checkpoint and read its session: a
        new run has none, a run just saved is in the chain cache) calls this
        with how many rows it is about to verify or decode (None: unbounded);
        past the bound it raises :class:`~nbdurable.durable._offload.WouldWait`
        and the call runs again on a store thread, as every such read did (issue 42).
        """
        if self.nowait and (rows is None or rows > NOWAIT_ROWS):
            raise WouldWait

    def close(self) -> None:
        """Close every connection (after a checkpoint in progress)."""
        with self.lock:
            self.closed = True
            if self.nowait_conn is not None:
                self.nowait_conn.close()
            with self._checkpoint_lock:
                if self._checkpoint_conn is not None:
                    self._checkpoint_conn.close()
                    self._checkpoint_conn = None
            self.conn.close()

    def _open_nowait_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=0, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA journal_size_limit = 262144")
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        except BaseException:
            conn.close()
            raise
        return conn

    def checkpoint_wal(self, *, force: bool = False) -> None:
        """Fold the write-ahead log into the file once it grew large (``force``: now).

        Called with the lock held, after a commit. On the event loop's thread
        (:attr:`nowait`) the checkpoint is handed to a store thread: it writes and
        syncs the database file.
        """
        if self._wal is None:
            return
        if self._wal_full and not self.nowait:
            self.truncate_checkpoint()
            return
        if not force:
            # Counted during a fold too: a fold that empties the log waits for a
            # moment without commits (background_checkpoint).
            self._writes += 1
            if self._writes % 4:
                return  # a commit adds a few pages: the size is looked at every 4th
            size = self._wal_size()
            if size >= _WAL_CEILING:
                self._wal_full = True
                if not self.nowait:
                    self.truncate_checkpoint()
                    return
            if self._checkpointing or size < self._checkpoint_at:
                return
        elif self._checkpointing and self._empty_after_this_one():
            return
        if not self.nowait:
            self._run_checkpoint()
            return
        self._checkpointing = True
        try:
            in_background(lambda: self.background_checkpoint(empty=force))
        except RuntimeError:  # the interpreter is exiting: the last close folds the log
            self._checkpointing = False

    def background_checkpoint(self, empty: bool = False) -> None:
        """On a store thread: a passive checkpoint, or with ``empty`` a ``TRUNCATE`` too.

        A run that stops or ends asks for ``empty``: the log is emptied when
        nothing else uses it right then. The connection's busy timeout is zero,
        so neither mode waits: a ``TRUNCATE`` that meets a writer or a reader
        folds what it can, as a passive one does, and leaves the log as it is.
        A ``TRUNCATE`` holds the file's write lock, so while others write
        (another run's commits came during the passive fold) it waits for a
        quiet moment, a passive fold each pause: under 200 runs, one each time a
        run ended sent every write meanwhile to a store thread (issue 42).
        """
        pause = _QUIET_FIRST
        try:
            while not self.closed:
                with self._checkpoint_lock:
                    if self.closed:  # close() ran meanwhile: nothing to fold, nothing to open
                        return
                    if self._checkpoint_conn is None:
                        self._checkpoint_conn = self._open_nowait_connection()
                    writes = self._writes
                    # Copy the pages first without the write lock, which a
                    # TRUNCATE holds from its start: the loop's writes then
                    # wait for it only while it empties the log.
                    self._run_checkpoint(self._checkpoint_conn, "PASSIVE")
                    if empty and self._writes == writes:
                        self._run_checkpoint(self._checkpoint_conn, "TRUNCATE")
                        empty = False
                # A run that stopped meanwhile asked for the log to be emptied.
                with self._flag_lock:
                    empty, self._empty_next = empty or self._empty_next, False
                    if not empty or self.closed:
                        self._checkpointing = False
                        return
                time.sleep(pause)
                pause = min(2 * pause, _QUIET_MAX)
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

    def truncate_checkpoint(self) -> None:
        """On a store thread, lock held: fold the whole log back and empty it."""
        # A checkpoint of another connection makes this one fail at once (busy),
        # and every write would leave the loop until it ends: wait for ours (not
        # for ever: a busy fold is tried again at the next write).
        waited = self._checkpoint_lock.acquire(timeout=_FOLD_WAIT)
        try:
            busy, _, _ = self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error:
            return  # the next write tries again; a failing file fails the writes themselves
        finally:
            if waited:
                self._checkpoint_lock.release()
        if not busy:
            self._wal_full = False
            self._checkpoint_at = _CHECKPOINT_BYTES

    def _run_checkpoint(
        self, conn: sqlite3.Connection | None = None, mode: str = "PASSIVE"
    ) -> None:
        """A ``PASSIVE`` (or ``TRUNCATE``) checkpoint on ``conn``; sets when the next one is due."""
        before = self._wal_size()
        try:
            busy, log, done = (
                (conn or self.conn).execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
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
