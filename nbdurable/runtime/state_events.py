"""The events a run-state change writes: ``run_state``, then the terminal event."""

from __future__ import annotations

from typing import Any

from ..durable.runtime_run import RuntimeRun
from ..events.model import RUN_ERROR, RUN_FINISHED, RUN_STATE, NewEvent
from .run import RunFailedError

__all__ = ["settled_nodes", "state_events", "terminal_event"]


def state_events(
    record: RuntimeRun, now: int, finish: dict[str, Any] | None = None
) -> list[NewEvent]:
    """The ``run_state`` event of the record's state, and its terminal event when final.

    Both go in one append, so the terminal event is the last one a final run writes.
    """
    payload: dict[str, Any] = {
        "state": record.state,
        "reason": record.reason,
        "next_attempt_at": record.next_attempt_at,
    }
    if record.retried:
        payload["retried"] = True
    events = [NewEvent(type=RUN_STATE, created_at=now, payload=payload)]
    if record.finished:
        events.append(terminal_event(record, now, finish))
    return events


def settled_nodes(nodes: list[RuntimeRun], finished: RuntimeRun) -> list[RuntimeRun]:
    """The graph nodes the store settled when ``finished`` finished (they need events).

    ``nodes`` is the graph in topological order, as the store lists it.
    """
    downstream = {finished.run_id}
    for node in nodes:  # dependents come after their dependencies
        if downstream.intersection(node.depends_on):
            downstream.add(node.run_id)
    return [
        node
        for node in nodes
        if node.run_id != finished.run_id
        and node.run_id in downstream
        and node.state != "queued"
        and node.updated_at == finished.updated_at
    ]


def terminal_event(record: RuntimeRun, now: int, finish: dict[str, Any] | None = None) -> NewEvent:
    """The terminal event of a finished run (``run_finished`` or ``run_error``).

    ``run_finished`` for a completed run (the completing leg's finish payload,
    when there was a leg); ``run_error`` for a failed or cancelled one, with the
    error :meth:`Run.result` raises. Both carry ``state``; ``run_error`` also
    ``reason`` and the run's last ``error``.
    """
    if record.state == "completed":
        return NewEvent(
            type=RUN_FINISHED, created_at=now, payload={**(finish or {}), "state": "completed"}
        )
    failure = RunFailedError(record)
    return NewEvent(
        type=RUN_ERROR,
        created_at=now,
        payload={
            "error_type": type(failure).__name__,
            "message": str(failure),
            "state": record.state,
            "reason": record.reason,
            "error": record.error,
        },
    )
