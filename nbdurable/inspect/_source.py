"""Where the inspection functions read from: a store object or a store URL."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Union

from .._errors import ConfigurationError
from ..durable.store import HISTORY, HistoryStore, supports

__all__ = ["StoreLike", "opened"]

StoreLike = Union[HistoryStore, str]
"""A store object, or a URL for :func:`nbdurable.open_store` (opened and closed per call)."""


@contextlib.contextmanager
def opened(store: StoreLike) -> Iterator[HistoryStore]:
    """The store itself, or a store opened from a URL and closed afterwards.

    Raises:
        ConfigurationError: The store keeps no history (inspection needs every
            checkpoint), or the URL names a file or directory that does not exist.
    """
    if isinstance(store, str):
        from ..stores import open_store

        owned: Any = open_store(store, create=False)  # reading makes no new store
        try:
            yield _checked(owned)
        finally:
            owned.close()
        return
    yield _checked(store)


def _checked(store: Any) -> HistoryStore:
    if not supports(store, HISTORY):
        raise ConfigurationError(
            f"{type(store).__name__} keeps no history; inspection needs a store with the "
            "'history' capability (every bundled store has it)"
        )
    return store  # type: ignore[no-any-return]
