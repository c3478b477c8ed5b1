"""The store a command works on: ``--store URL``, opened once and closed after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._errors import RunNotFoundError
from ..stores.default import DEFAULT_STORE, default_store

__all__ = ["DEFAULT_STORE", "default_store", "opened_store"]


@contextmanager
def opened_store(url: str, *, create: bool = False) -> Iterator[Any]:
    """The store at ``url``, closed when the block ends.

    Commands that read or steer existing runs leave ``create`` False: a store
    that does not exist is then an error naming its path, not a new empty file.
    """
    from ..stores import open_store

    store: Any = open_store(url, create=create)
    try:
        yield store
    except RunNotFoundError as exc:
        # "no such run" says where it looked: a wrong --store reads as a wrong id otherwise
        if url in str(exc):
            raise
        raise RunNotFoundError(exc.run_id, f"{str(exc).rstrip('.')} in {url}") from None
    finally:
        store.close()
