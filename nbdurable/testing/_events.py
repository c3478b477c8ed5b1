"""The event-log tests: every store declaring ``events`` (an ``EventLog``).

Offsets are per run, start at 1, have no holes and continue across handles;
the fenced appends of a run's owner are proven with the run records
(:mod:`._claims`).
"""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd
from nbdurable.events import NewEvent

from ..durable.store import Capability
from ._fixtures import Reopen, require
from ._threads import in_threads


def new(kind: str, n: int = 0) -> NewEvent:
    """An event of type ``kind`` at step ``n``, with a payload that is not ASCII."""
    return NewEvent(type=kind, step_index=n, payload={"n": n, "text": "é ✓"}, created_at=1000 + n)


def checkpoint(run_id: str, step: int) -> nd.AgentCheckpoint:
    """A checkpoint of ``run_id`` at ``step``."""
    return nd.AgentCheckpoint(
        run_id=run_id,
        step_index=step,
        status="running",
        messages=(nd.user("hi"), *(nd.assistant(f"step {i}") for i in range(step + 1))),
        created_at=step,
    )


def test_offsets_start_at_one_have_no_holes_and_continue(event_store: Any) -> None:
    store = event_store
    first = store.append_events("r", [new("a", 0), new("b", 1)])
    assert [e.offset for e in first] == [1, 2]
    with_checkpoint = store.save_with_events(checkpoint("r", 0), [new("c", 2)])
    assert [e.offset for e in with_checkpoint] == [3]
    assert [e.offset for e in store.append_events("r", [new("d", 3)])] == [4]
    assert [e.offset for e in store.append_events("other", [new("x")])] == [1]
    events = store.read_events("r")
    assert [(e.offset, e.type) for e in events] == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    assert events[0].payload == {"n": 0, "text": "é ✓"} and events[0].created_at == 1000
    assert store.read_events("r", after=2) == events[2:]
    assert store.read_events("r", after=1, limit=2) == events[1:3]
    assert store.read_events("r", after=4) == []
    assert store.load("r") == checkpoint("r", 0)


def test_unknown_runs_raise_run_not_found(event_store: Any) -> None:
    store = event_store
    with pytest.raises(nd.RunNotFoundError):
        store.read_events("nope")
    store.save(checkpoint("quiet", 0))  # a run with checkpoints but no events yet
    assert store.read_events("quiet") == []


def test_delete_removes_the_log(event_store: Any) -> None:
    store = event_store
    store.save_with_events(checkpoint("r", 0), [new("a")])
    store.delete("r")
    with pytest.raises(nd.RunNotFoundError):
        store.read_events("r")


def test_the_log_survives_reopening(event_store: Any, reopen: Reopen) -> None:
    require(event_store, Capability.PERSISTENT)
    store = event_store
    store.append_events("r", [new("a")])
    store.save_with_events(checkpoint("r", 0), [new("b")])
    store.close()
    again = reopen()
    assert [e.offset for e in again.append_events("r", [new("c")])] == [3]
    assert [e.type for e in again.read_events("r")] == ["a", "b", "c"]
    again.close()


def test_concurrent_appends_from_threads_keep_offsets_gap_free(event_store: Any) -> None:
    store = event_store

    def writer(n: int) -> None:
        for i in range(20):
            store.append_events("r", [new(f"w{n}", i), new(f"w{n}", i)])

    in_threads(writer, 4)
    events = store.read_events("r")
    assert [e.offset for e in events] == list(range(1, 161))
    store.close()
