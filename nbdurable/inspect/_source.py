"""Where the inspection functions read from: a store object or a store URL."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Union

from .._errors import ConfigurationError, RunNotFoundError
from ..durable._lookup import runtime_record
from ..durable.store import HISTORY, EventLog, HistoryStore, supports
from ..events._model import Event
from ..runs import RuntimeRun

__all__ = ["StoreLike", "opened", "run_events"]

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


def run_events(
    source: HistoryStore, run_id: str, after: int = 0
) -> tuple[Sequence[Event], RuntimeRun | None]:
    """The run's logged events past offset ``after``, and its runtime record.

    Raises:
        ConfigurationError: The store keeps no event log.
        RunNotFoundError: Neither an event (from the start), a checkpoint nor a
            record of the run exists.
    """
    if not isinstance(source, EventLog):
        raise ConfigurationError(f"{type(source).__name__} keeps no event log")
    logged: Sequence[Event] = source.read_events(run_id, after=after)
    record = runtime_record(source, run_id)
    if not logged and after == 0 and not source.history(run_id) and record is None:
        raise RunNotFoundError(run_id)
    return logged, record
