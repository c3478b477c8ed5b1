"""Finding a run's stored checkpoint or runtime record, with errors that say what exists."""

from __future__ import annotations

from .._errors import CheckpointNotFoundError, RunNotFoundError
from ..runs import RuntimeRun
from ._checkpoint import AgentCheckpoint
from .store import HistoryStore, RunStore

__all__ = ["checkpoint_at", "runtime_record"]


def runtime_record(store: HistoryStore, run_id: str) -> RuntimeRun | None:
    """The runtime's record of a run, when the store keeps run records and has one."""
    return store.rt_get(run_id) if isinstance(store, RunStore) else None


def checkpoint_at(store: HistoryStore, run_id: str, step_index: int | None) -> AgentCheckpoint:
    """The run's checkpoint at ``step_index`` (the latest when None).

    Raises:
        RunNotFoundError: The store has no checkpoint of the run.
        CheckpointNotFoundError: The run has no checkpoint at that step.
    """
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
