"""Where the inspection functions read from: a store object or a store URL."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Union

from .._errors import ConfigurationError, RunNotFoundError
from ..durable.checkpoint import AgentCheckpoint
from ..durable.store import HISTORY, RUNTIME, HistoryStore, supports
from ..runtime.records import RuntimeRun

__all__ = ["StoreLike", "checkpoint_at", "opened", "runtime_record"]

StoreLike = Union[HistoryStore, str]
"""A store object, or a URL for :func:`nbdurable.open_store` (opened and closed per call)."""


@contextlib.contextmanager
def opened(store: StoreLike) -> Iterator[HistoryStore]:
    """The store itself, or a store opened from a URL and closed afterwards.

    Raises:
        ConfigurationError: The store keeps no history (inspection needs every checkpoint).
    """
    if isinstance(store, str):
        from ..stores import open_store

        owned: Any = open_store(store)
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


def runtime_record(store: HistoryStore, run_id: str) -> RuntimeRun | None:
    """The runtime's record of a run, when the store keeps run records and has one."""
    if not supports(store, RUNTIME):
        return None
    record: RuntimeRun | None = store.rt_get(run_id)  # type: ignore[attr-defined]
    return record


def checkpoint_at(store: HistoryStore, run_id: str, step_index: int | None) -> AgentCheckpoint:
    """The run's checkpoint at ``step_index`` (the latest when None).

    Raises:
        RunNotFoundError: The store has no checkpoint of the run.
        CheckpointNotFoundError: The run has no checkpoint at that step.
    """
    from .._errors import CheckpointNotFoundError

    checkpoint = store.load(run_id, step_index=step_index)
    if checkpoint is not None:
        return checkpoint
    if step_index is None or store.load(run_id) is None:
        raise RunNotFoundError(run_id)
    steps = sorted({info.step_index for info in store.history(run_id)})
    raise CheckpointNotFoundError(
        run_id,
        message=(
            f"run {run_id!r} has no checkpoint at step {step_index}; its steps are {_ranges(steps)}"
        ),
    )


def _ranges(steps: list[int]) -> str:
    if not steps:
        return "none"
    spans: list[str] = []
    start = prev = steps[0]
    for step in [*steps[1:], None]:
        if step is not None and step == prev + 1:
            prev = step
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if step is not None:
            start = prev = step
    return ", ".join(spans)
