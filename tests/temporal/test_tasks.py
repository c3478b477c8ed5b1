"""Custom tasks on the real Temporal dev server: the embedded engine's states."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import temporal_tasks
from temporal_tasks import counted
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import CancelledError

import nbdurable as nd
from nbdurable.runtime import DurableRuntime, TaskRun
from nbdurable.runtime.tasks import TASK_PHASE
from nbdurable.temporal import TemporalEngine


def _runtime(store: Any, engine: TemporalEngine | None = None) -> DurableRuntime:
    return DurableRuntime(
        store=store, agents=temporal_tasks.agents, tasks=temporal_tasks.tasks, engine=engine
    )


def _states(store: Any, run_id: str) -> list[str]:
    return [e.payload["state"] for e in store.read_events(run_id) if e.type == "run_state"]


async def _until(predicate: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.05)


async def test_a_two_phase_task_with_owned_runs_completes_without_a_client(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    """The client submits and goes away: the worker starts the owned runs' workflows
    itself; the task's state, children, phase events and inspection read as embedded."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    calls = tmp_path / "calls.db"
    start_worker(queue, url, tasks=True, NBDURABLE_TEST_TOOLS=str(calls))
    store = nd.open_store(url)
    engine = TemporalEngine(address=temporal_server, task_queue=queue)
    async with _runtime(store, engine) as client:
        await client.submit_task("digest", {"topic": "tables"}, run_id="t1")
    watcher = _runtime(store)  # never opened: it only reads the store
    run = await watcher.get_run("t1")
    assert isinstance(run, TaskRun)
    state = await asyncio.wait_for(run.result(), 60)
    assert state == {
        "topic": "tables",
        "summary": "echo(combine echo(part one of tables) + echo(part two of tables))",
        "parts": 2,
    }
    assert [c.run_id for c in run.children()] == ["t1:split:0", "t1:split:1", "t1:combine:0"]
    assert {c.status for c in run.children()} == {"completed"}
    assert run.record().phase == 2 and run.state() == state
    phases = [e.payload["phase"] for e in store.read_events("t1") if e.type == TASK_PHASE]
    assert phases == ["split", "combine"]
    assert _states(store, "t1") == ["pending", "running", "completed"]
    assert set(counted(calls, "phase").values()) == {1}
    assert set(counted(calls, "model").values()) == {1}
    frame = nd.inspect.runs(store)
    assert frame.loc["t1", "kind"] == "task" and frame.loc["t1", "status"] == "completed"
    assert frame.loc["t1:combine:0", "owner_run"] == "t1"
    assert [r.state for r in watcher.list_runs()] == ["completed"] * 4


async def test_sigkill_mid_phase_then_a_second_worker_finishes(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    """A worker SIGKILLed in the second phase: another worker re-runs that phase from
    the first phase's journaled state; no completed phase or owned run runs again."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    calls = tmp_path / "calls.db"
    env = {"NBDURABLE_TEST_TOOLS": str(calls)}
    first = start_worker(queue, url, tasks=True, NBDURABLE_TEST_SLOW="30", **env)
    store = nd.open_store(url)
    engine = TemporalEngine(address=temporal_server, task_queue=queue, heartbeat_timeout=1.5)
    async with _runtime(store, engine) as rt:
        run = await rt.submit_task("digest", {"topic": "logs"}, run_id="t2")
        await _until(lambda: counted(calls, "paused"))
        first.kill()  # SIGKILL in the second phase, its owned run completed
        start_worker(queue, url, tasks=True, NBDURABLE_TEST_SLOW="0", **env)
        state = await asyncio.wait_for(run.result(), 60)
    assert state["summary"] == "echo(combine echo(part one of logs) + echo(part two of logs))"
    assert counted(calls, "phase") == {"t2:split": 1, "t2:combine": 2}
    assert set(counted(calls, "model").values()) == {1}  # each owned run executed once
    assert [e.payload["index"] for e in store.read_events("t2") if e.type == TASK_PHASE] == [0, 1]
    assert store.rt_get("t2").state == "completed"


async def test_cancelling_a_task_cancels_its_owned_runs(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    start_worker(queue, url, tasks=True)
    store = nd.open_store(url)
    engine = TemporalEngine(address=temporal_server, task_queue=queue, heartbeat_timeout=2)
    async with _runtime(store, engine) as rt:
        task = await rt.submit_task("waiter", None, run_id="t3")
        await _until(lambda: store.rt_get("t3:wait_for_approval:0") is not None)
        child = await rt.get_run("t3:wait_for_approval:0")
        await asyncio.wait_for(child.wait("waiting_approval"), 30)
        await task.cancel()
        record = await asyncio.wait_for(task.wait(), 30)
        assert record.state == "cancelled" and record.reason == "cancelled"
        child_record = await asyncio.wait_for(child.wait(), 30)
        assert child_record.state == "cancelled"
        with pytest.raises(nd.RunFailedError):
            await task.result()
        handle = (await engine.client()).get_workflow_handle("t3")
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 30)  # the workflow itself ends cancelled
        assert isinstance(failure.value.cause, CancelledError)
    assert _states(store, "t3")[-2:] == ["cancelling", "cancelled"]


async def test_a_failed_phase_retries_from_its_checkpoint_and_a_timeout_fails_the_task(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    """A phase that raises fails the task (error); retry() runs a new workflow that
    re-runs that phase only. A phase still running at the deadline fails it (timeout)."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    calls, broken = tmp_path / "calls.db", tmp_path / "broken.txt"
    broken.write_text("second\n")
    env = {"NBDURABLE_TEST_TOOLS": str(calls), "NBDURABLE_TEST_BROKEN": str(broken)}
    start_worker(queue, url, tasks=True, **env)
    store = nd.open_store(url)
    engine = TemporalEngine(address=temporal_server, task_queue=queue)
    async with _runtime(store, engine) as rt:
        two = await rt.submit_task("two", 0, run_id="t4")
        sleepy = await rt.submit_task("sleepy", 1, timeout=1.5)
        failed = await asyncio.wait_for(two.wait(), 30)
        assert (failed.state, failed.reason) == ("failed", "error")
        assert failed.error == "ValueError: not today"
        broken.unlink()
        await two.retry()
        assert await asyncio.wait_for(two.result(), 30) == 11
        timed_out = await asyncio.wait_for(sleepy.wait(), 30)
    assert (timed_out.state, timed_out.reason) == ("failed", "timeout")
    assert counted(calls, "phase") == {"t4:first": 1, "t4:second": 2}
    assert _states(store, "t4") == [
        "pending",
        "running",
        "failed",
        "pending",
        "running",
        "completed",
    ]
