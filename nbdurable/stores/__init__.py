"""Bundled session stores and ``open_store(url)``.

Backend modules load on first use (``open_store`` with their scheme, or the
class attribute), so ``import nbdurable`` stays light and optional backends stay
optional.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from .._errors import ConfigurationError
from ..durable.store import HistoryStore
from .memory import InMemorySessionStore

if TYPE_CHECKING:
    from .jsonl import JsonlSessionStore
    from .postgres import PostgresSessionStore
    from .sqlite import SqliteSessionStore

__all__ = [
    "InMemorySessionStore",
    "JsonlSessionStore",
    "PostgresSessionStore",
    "SqliteSessionStore",
    "missing_path",
    "open_store",
]

# The postgres module imports psycopg only when a store is created, so naming
# the class (a star import included) works without the extra.
_LAZY = {
    "SqliteSessionStore": ".sqlite",
    "JsonlSessionStore": ".jsonl",
    "PostgresSessionStore": ".postgres",
}
_POSTGRES_EXTRA = "nbdurable[postgres]"
_log = logging.getLogger("nbdurable.stores")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def open_store(url: str, *, create: bool = True) -> HistoryStore:
    """Open a store from a URL; only the backend the URL names is imported.

    - ``memory://``: a new :class:`InMemorySessionStore`.
    - ``sqlite:///runs.db`` (relative to the working directory),
      ``sqlite:////abs/runs.db`` (absolute), ``sqlite:///:memory:``:
      a :class:`SqliteSessionStore`.
    - ``jsonl:///dir`` (relative) or ``jsonl:////abs/dir``: a :class:`JsonlSessionStore`.
    - ``postgresql://user@host/db`` (or ``postgres://``), optionally with
      ``?schema=name``: a :class:`PostgresSessionStore`, which needs the
      ``nbdurable[postgres]`` extra.

    Paths are percent-decoded and ``~`` expands to the home directory.

    Args:
        url: The store's URL.
        create: Whether a SQLite file or JSONL directory that does not exist is
            created (logged at DEBUG on ``nbdurable.stores``; ``nbdurable worker``
            and ``nbdurable serve`` say so on their ready line). Code that only
            reads (``nbdurable runs``, ``store check``, :mod:`nbdurable.inspect`)
            passes False, so a mistyped path is an error instead of a new empty store.

    Raises:
        ConfigurationError: The URL is malformed, its scheme unknown, its
            backend's extra not installed, or (``create=False``) its file or
            directory does not exist; nothing is created then.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"store URL must be a string, not {url!r}")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise ConfigurationError(f"store URL {url!r} has no scheme: {_SUPPORTED}")
    if scheme == "memory":
        if rest:
            raise ConfigurationError(f"memory:// takes no path, got {url!r}")
        return InMemorySessionStore()
    if scheme == "sqlite":
        from .sqlite import SqliteSessionStore

        path = local_path(url, rest)
        if path == ":memory:":
            return SqliteSessionStore(path)
        new = _missing(url, Path(path), "SQLite store file", create)
        sqlite_store = SqliteSessionStore(Path(path))
        _created(url, new)
        return sqlite_store
    if scheme == "jsonl":
        from .jsonl import JsonlSessionStore

        directory = Path(local_path(url, rest))
        new = _missing(url, directory, "JSONL store directory", create)
        jsonl_store = JsonlSessionStore(directory)
        _created(url, new)
        return jsonl_store
    if scheme in ("postgresql", "postgres"):
        store: HistoryStore = _postgres().PostgresSessionStore(url)
        return store
    raise ConfigurationError(f"unknown store URL scheme {scheme!r} in {url!r}: {_SUPPORTED}")


_SUPPORTED = "expected memory://, sqlite:///path, jsonl:///dir or postgresql://..."


def missing_path(url: str) -> Path | None:
    """The file or directory of a ``sqlite:///`` or ``jsonl:///`` URL when it does not exist.

    None for a store that exists, ``:memory:`` and the other kinds (a server
    holds them).

    Raises:
        ConfigurationError: A file store's URL without a path.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("sqlite", "jsonl"):
        return None
    path = local_path(url, rest)
    return None if path == ":memory:" or Path(path).exists() else Path(path)


def local_path(url: str, rest: str) -> str:
    """The file path of a file store's URL (``rest`` is what follows ``scheme://``)."""
    # As in SQLAlchemy: "scheme:///" then the path, so a fourth slash makes it absolute.
    if not rest.startswith("/") or len(rest) < 2:
        raise ConfigurationError(
            f"store URL {url!r} needs a path after three slashes, "
            f"e.g. {url.partition('://')[0]}:///runs (relative) or :////abs/runs"
        )
    path = unquote(rest[1:].split("?", 1)[0])
    return path if path == ":memory:" else str(Path(path).expanduser())


def _missing(url: str, path: Path, what: str, create: bool) -> bool:
    """Whether the store at ``path`` is new; with ``create=False`` a new one is refused."""
    if path.exists():
        return False
    if create:
        return True
    from ._default import STORE_ENV_VAR, default_store

    default = default_store()
    if url == default:
        hint = (
            "it is the default store, which the first run submitted from a notebook, a worker "
            f"or `nbdurable serve` creates; or name another (--store URL, {STORE_ENV_VAR})"
        )
    else:
        hint = f"check the path (the default store is {default})"
    raise ConfigurationError(
        f"no {what} at {str(path.absolute())!r} ({url}): nothing was created; {hint}"
    )


def _created(url: str, new: bool) -> None:
    if new:
        # DEBUG: a worker's or a bridge's ready line says it (a first line others read)
        _log.debug("created a new store: %s", url)


def _postgres() -> Any:
    try:
        return importlib.import_module(".postgres", __name__)
    except ImportError as exc:
        raise ConfigurationError(
            f"postgresql:// stores need the {_POSTGRES_EXTRA} extra "
            f"(pip install '{_POSTGRES_EXTRA}'): {exc}"
        ) from exc
