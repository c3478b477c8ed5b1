"""Conformance: ``store.prune`` deletes finished runs with their checkpoints, events and
run records, and never an unfinished run or one tied to it, on every bundled store."""

from __future__ import annotations

from typing import Any

import pytest
from support.records import pending_run

import nbdurable as nd
from nbdurable.durable.store import RUNTIME, supports
from nbdurable.events._model import NewEvent
from nbdurable.runs import RunPatch, RuntimeRun

from .conftest import StoreCase

DAY = 86_400_000
NOW = 1_800_000_000_000
OLD = NOW - 40 * DAY
CUTOFF = NOW - 30 * DAY


def save(store: Any, run_id: str, status: str, at: int, steps: int = 2) -> None:
    messages: tuple[nd.Message, ...] = (nd.user(f"Work on {run_id}."),)
    for step in range(steps):
        messages = (*messages, nd.assistant(f"step {step} of {run_id}"))
        store.save(
            nd.AgentCheckpoint.model_validate(
                {
                    "run_id": run_id,
                    "step_index": step,
                    "status": status if step == steps - 1 else "running",
                    "messages": messages,
                    "created_at": at - steps + step + 1,
                }
            )
        )


def events(store: Any, run_id: str) -> None:
    store.append_events(
        run_id, [NewEvent(type="run.started", created_at=OLD), NewEvent(type="x", created_at=OLD)]
    )


def record(store: Any, run_id: str, state: str, at: int, **fields: Any) -> RuntimeRun:
    """A run record that ends in ``state`` at ``at``."""
    run = pending_run(run_id, at=at - 1000, **fields)
    store.rt_insert(run, enqueue=False, max_pending=1000)
    if state == "pending":
        return run
    return store.rt_update(run_id, RunPatch(state=state, updated_at=at))  # type: ignore[no-any-return]


def no_events(store: Any, run_id: str) -> bool:
    """Whether the run's event log is gone (JSONL: its file, so the run is unknown)."""
    try:
        return store.read_events(run_id) == []
    except nd.RunNotFoundError:
        return True


def stored(store: Any) -> set[str]:
    return set(store.list())


def test_finished_loop_runs_go_with_their_sub_agents_and_events(any_store: Any) -> None:
    save(any_store, "old-done", "completed", OLD)
    save(any_store, "old-done::helper#call_1", "completed", OLD)
    events(any_store, "old-done")
    save(any_store, "old-suspended", "suspended", OLD)  # may still be resumed
    save(any_store, "old-running", "running", OLD)  # a crashed loop, still to recover
    save(any_store, "new-done", "completed", NOW)
    before = stored(any_store)

    plan = any_store.prune(CUTOFF, dry_run=True)
    assert plan.dry_run and [run.run_id for run in plan.runs] == ["old-done"]
    assert set(plan.runs[0].stored_runs) == {"old-done", "old-done::helper#call_1"}
    assert plan.runs[0].status == "completed" and plan.runs[0].finished_at == OLD
    assert stored(any_store) == before  # a dry run deletes nothing

    report = any_store.prune(CUTOFF)
    assert not report.dry_run and [run.run_id for run in report.runs] == ["old-done"]
    assert stored(any_store) == {"old-suspended", "old-running", "new-done"}
    assert any_store.load("old-done") is None and any_store.history("old-done") == []
    assert no_events(any_store, "old-done")
    assert any_store.load("new-done") is not None  # the others are intact
    assert len(any_store.history("old-suspended")) == 2
    assert any_store.prune(CUTOFF).runs == ()  # nothing left to prune


def test_run_records_decide_and_unfinished_runs_stay(any_store: Any, store_case: StoreCase) -> None:
    if not supports(any_store, RUNTIME):
        pytest.skip(f"{store_case.backend.name} keeps no run records")
    for run_id, state in (("done", "completed"), ("broke", "failed"), ("stopped", "cancelled")):
        record(any_store, run_id, state, OLD)
        save(any_store, run_id, "completed", OLD)
        events(any_store, run_id)
    record(any_store, "task-only", "completed", OLD)  # a task: a record, no checkpoints
    # unfinished runs stay, whatever their checkpoints say
    record(any_store, "parked", "waiting_approval", OLD)
    save(any_store, "parked", "suspended", OLD)
    record(any_store, "retrying", "pending", OLD)
    save(any_store, "retrying", "completed", OLD)
    record(any_store, "recent", "completed", NOW)
    save(any_store, "recent", "completed", NOW)
    # a graph with an unfinished node keeps its finished nodes
    record(any_store, "node-a", "completed", OLD, graph_id="g1", node_id="a")
    record(any_store, "node-b", "pending", OLD, graph_id="g1", node_id="b")
    # a finished graph goes whole
    record(any_store, "node-c", "completed", OLD, graph_id="g2", node_id="c")
    record(any_store, "node-d", "failed", OLD, graph_id="g2", node_id="d")
    # an unfinished task keeps the runs it owns; a finished one owned by it stays too
    record(any_store, "task", "running", OLD, kind="task")
    record(any_store, "owned", "completed", OLD, owner_run_id="task")

    report = any_store.prune(CUTOFF)
    gone = {run.run_id for run in report.runs}
    assert gone == {"done", "broke", "stopped", "task-only", "node-c", "node-d"}
    assert {run.run_id: run.status for run in report.runs}["broke"] == "failed"
    remaining = {run.run_id for run in any_store.rt_list()}
    assert remaining == {"parked", "retrying", "recent", "node-a", "node-b", "task", "owned"}
    for run_id in ("done", "broke", "stopped"):
        assert any_store.rt_get(run_id) is None
        assert any_store.load(run_id) is None
        assert no_events(any_store, run_id)
    assert any_store.load("retrying") is not None and any_store.load("parked") is not None


def test_pruning_gives_the_space_back(any_store: Any, store_case: StoreCase) -> None:
    for i in range(30):
        save(any_store, f"bulky-{i}", "completed", OLD, steps=4)
    save(any_store, "kept", "completed", NOW)
    footprint = store_case.backend.footprint
    before = footprint(store_case.url) if footprint is not None else None
    report = any_store.prune(CUTOFF)
    assert len(report.runs) == 30
    if store_case.backend.name == "sqlite":
        assert report.reclaimed is not None and report.reclaimed.startswith("VACUUM: ")
    if store_case.backend.name == "postgres":
        # VACUUM (ANALYZE) of the store's tables, with their size as PostgreSQL counts it
        assert report.reclaimed is not None and report.reclaimed.startswith("VACUUM: the tables")
    if footprint is not None and before is not None and store_case.backend.name != "postgres":
        # SQLite's file and JSONL's files shrink at once; PostgreSQL's VACUUM makes the
        # rows' space reusable, and returns only the empty pages at a table's end
        after = footprint(store_case.url)
        assert after.disk < before.disk, (before, after)
    assert stored(any_store) == {"kept"}
