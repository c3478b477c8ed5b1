"""SQLite's failures as nbdurable's typed errors, naming the file and what to do.

- A damaged file ("file is not a database", "database disk image is malformed",
  text that is not UTF-8) is a :class:`~nbdurable.StoreCorruptionError` that
  points at ``nbdurable store check`` and a backup.
- A refused write (SQLITE_FULL, SQLITE_READONLY, a write I/O error, a file
  that cannot be opened for writing) is a :class:`~nbdurable.StoreWriteError`:
  the transaction rolled back whole, so what was committed before it is intact.

Everything else (busy, locked, constraint violations the store handles itself)
stays as SQLite raised it, except inside the store's ``run_without_waiting``
scope, where a busy or other transient failure raises
:class:`~nbdurable.durable._offload.WouldWait` (the call then runs on a store thread).
"""

from __future__ import annotations

import functools
import inspect
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..._errors import NbdurableError, StoreCorruptionError, StoreWriteError
from ...durable._offload import WouldWait
from ...durable._transient import is_transient

__all__ = ["guard_methods", "store_url", "typed_error"]

F = TypeVar("F", bound=Callable[..., Any])

# Primary result codes (https://sqlite.org/rescode.html).
_READONLY = 8
_IOERR = 10
_CORRUPT = 11
_FULL = 13
_CANTOPEN = 14
_NOTADB = 26
# Extended I/O error codes that come from reading: a file shorter than its
# header says (truncated) reads short.
_IOERR_READ = _IOERR | (1 << 8)
_IOERR_SHORT_READ = _IOERR | (2 << 8)

_CORRUPT_TEXT = (
    "file is not a database",
    "database disk image is malformed",
    "unsupported file format",
    # The store's own queries fail so only when its schema was damaged.
    "no such column",
    "no such index",
    "no such table",
    "has no column named",
)
_DECODE_TEXT = "could not decode to utf-8"
_FULL_TEXT = "database or disk is full"
_READONLY_TEXT = "readonly database"
_IO_TEXT = "disk i/o error"
_CANTOPEN_TEXT = "unable to open database file"


def store_url(path: str) -> str:
    """The ``sqlite://`` URL of a store file (four slashes for an absolute path)."""
    return f"sqlite:///{path}"


def typed_error(exc: Exception, path: str) -> NbdurableError | None:
    """The typed error for ``exc`` raised on the store file ``path``, or None to keep it.

    ``exc`` is an ``sqlite3.Error``, or a ``UnicodeDecodeError`` from the driver
    (a damaged schema or text it cannot decode, even in SQLite's error message).
    """
    if isinstance(exc, UnicodeDecodeError):
        return _corruption(f"stored text is not valid UTF-8 ({exc})", path)
    # sqlite_errorcode exists from Python 3.11; older versions are told by the message.
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    primary = None if code is None else code & 0xFF
    text = str(exc).lower()
    if primary in (_CORRUPT, _NOTADB) or code in (_IOERR_READ, _IOERR_SHORT_READ):
        return _corruption(str(exc), path)
    if any(t in text for t in _CORRUPT_TEXT):
        return _corruption(str(exc), path)
    if _DECODE_TEXT in text:
        return _corruption(f"stored text is not valid UTF-8 ({exc})", path)
    if primary == _FULL or (primary is None and _FULL_TEXT in text):
        return StoreWriteError(
            f"cannot write to the SQLite store {path}: the disk is full ({exc}). Nothing of "
            "this write was stored and earlier checkpoints are intact; free space and go on.",
            path=path,
            reason="full",
        )
    if primary == _READONLY or (primary is None and _READONLY_TEXT in text):
        return StoreWriteError(
            f"cannot write to the SQLite store {path}: it is read-only ({exc}). Nothing of "
            "this write was stored; make the file, its directory (SQLite writes a -wal and "
            "a -shm file beside it) and the file system writable.",
            path=path,
            reason="readonly",
        )
    if primary == _CANTOPEN or (primary is None and _CANTOPEN_TEXT in text):
        return StoreWriteError(
            f"cannot open the SQLite store {path} for writing ({exc}): the file, its "
            "directory (for the -wal and -shm files) or the file system is read-only or "
            "not accessible. Open a writable copy to read it.",
            path=path,
            reason="readonly",
        )
    if primary == _IOERR or (primary is None and _IO_TEXT in text):
        return StoreWriteError(
            f"cannot write to the SQLite store {path}: {exc}. Nothing of this write was "
            f"stored; check the disk, then run `nbdurable store check {store_url(path)}`.",
            path=path,
            reason="io",
        )
    return None


_REMEDY = (
    "run `nbdurable store check {url}` to see which runs are affected, and restore "
    "the file from a backup (docs/stores.md, 'Broken store files')"
)


def _corruption(detail: str, path: str) -> StoreCorruptionError:
    remedy = _REMEDY.format(url=store_url(path))
    return StoreCorruptionError(
        f"the SQLite store {path} is damaged: {detail}. {remedy[0].upper()}{remedy[1:]}.",
        path=path,
    )


def guarded(method: F) -> F:
    """``method`` of the store or one of its parts (its ``_db``), raising typed errors."""
    takes_run_id = list(inspect.signature(method).parameters)[1:2] == ["run_id"]

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            db = self._db
            if db.nowait_thread == threading.get_ident() and is_transient(exc):
                # On the loop's thread a retry would sleep there: a store thread retries.
                raise WouldWait from exc
            typed = typed_error(exc, db.path)
            if typed is None:
                raise
            if isinstance(typed, StoreCorruptionError) and takes_run_id:
                typed.run_id = args[0] if args else kwargs.get("run_id")
            raise typed from exc
        except StoreCorruptionError as exc:
            if exc.path is None:  # a row that does not decode: name the file and the remedy
                path = exc.path = self._db.path
                exc.args = (f"{exc} (in {path}; {_REMEDY.format(url=store_url(path))})",)
            raise

    return wrapper  # type: ignore[return-value]


def guard_methods(cls: type) -> None:
    """Wrap the public methods ``cls`` defines with :func:`guarded`."""
    for name, value in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(value):
            continue  # private helpers run inside a guarded method; properties need no guard
        setattr(cls, name, guarded(value))
