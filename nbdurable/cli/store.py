"""The store a command works on: ``--store URL``, opened once and closed after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..stores.default import DEFAULT_STORE, default_store

__all__ = ["DEFAULT_STORE", "default_store", "opened_store"]


@contextmanager
def opened_store(url: str) -> Iterator[Any]:
    """The store at ``url``, closed when the block ends."""
    from ..stores import open_store

    store: Any = open_store(url)
    try:
        yield store
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
