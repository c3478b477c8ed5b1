"""Every engine: custom tasks run their phases from the last checkpoint, own agent runs,
are cancelled with them, retried from the failed phase and failed at their deadline."""

from __future__ import annotations

import asyncio

import pytest
from support.executions import run_states
from support.temporal_tasks import counted
from support.waiting import eventually

import nbdurable as nd
from nbdurable.runtime import TaskRun
from nbdurable.runtime._tasks import TASK_PHASE

from .conftest import EngineCase


async def test_a_two_phase_task_with_owned_runs_completes_without_a_client(
    engine: EngineCase,
) -> None:
    """The client submits and goes away: the workers start the owned runs
    themselves; the task's state, children, phase events and inspection read as embedded."""
    calls, store = engine.tools, engine.store
    engine.worker()
    async with engine.client() as client:
        await client.submit_task("digest", {"topic": "tables"}, run_id="t1")
    watcher = engine.reader()  # never opened: it only reads the store
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
    assert run_states(store, "t1") == ["pending", "running", "completed"]
    assert set(counted(calls, "phase").values()) == {1}
    assert set(counted(calls, "model").values()) == {1}
    frame = nd.inspect.runs(store)
    assert frame.loc["t1", "kind"] == "task" and frame.loc["t1", "status"] == "completed"
    assert frame.loc["t1:combine:0", "owner_run"] == "t1"
    assert [r.state for r in watcher.list_runs()] == ["completed"] * 4


async def test_sigkill_mid_phase_then_a_second_worker_finishes(engine: EngineCase) -> None:
    """A worker SIGKILLed in the second phase: another worker re-runs that phase from
    the first phase's journaled state; no completed phase or owned run runs again."""
    calls, store = engine.tools, engine.store
    first = engine.worker(slow=30)
    async with engine.client() as rt:
        run = await rt.submit_task("digest", {"topic": "logs"}, run_id="t2")
        await eventually(lambda: bool(counted(calls, "paused")), timeout=30)
        first.kill()  # SIGKILL in the second phase, its owned run completed
        engine.worker(slow=0)
        state = await asyncio.wait_for(run.result(), 60)
    assert state["summary"] == "echo(combine echo(part one of logs) + echo(part two of logs))"
    assert counted(calls, "phase") == {"t2:split": 1, "t2:combine": 2}
    assert set(counted(calls, "model").values()) == {1}  # each owned run executed once
    assert [e.payload["index"] for e in store.read_events("t2") if e.type == TASK_PHASE] == [0, 1]
    assert store.rt_get("t2").state == "completed"


async def test_cancelling_a_task_cancels_its_owned_runs(engine: EngineCase) -> None:
    store = engine.store
    engine.worker()
    async with engine.client() as rt:
        task = await rt.submit_task("waiter", None, run_id="t3")
        await eventually(lambda: store.rt_get("t3:wait_for_approval:0") is not None, timeout=30)
        child = await rt.get_run("t3:wait_for_approval:0")
        await asyncio.wait_for(child.wait("waiting_approval"), 30)
        await task.cancel()
        record = await asyncio.wait_for(task.wait(), 30)
        assert record.state == "cancelled" and record.reason == "cancelled"
        child_record = await asyncio.wait_for(child.wait(), 30)
        assert child_record.state == "cancelled"
        with pytest.raises(nd.RunFailedError):
            await task.result()
        await engine.assert_execution_cancelled(rt, "t3")
    assert run_states(store, "t3")[-2:] == ["cancelling", "cancelled"]


async def test_a_failed_phase_retries_from_its_checkpoint_and_a_timeout_fails_the_task(
    engine: EngineCase,
) -> None:
    """A phase that raises fails the task (error); retry() re-runs that phase only. A phase still running at the deadline fails it (timeout)."""
    calls, store = engine.tools, engine.store
    broken = calls.parent / "broken.txt"
    broken.write_text("second\n")
    engine.worker(NBDURABLE_TEST_BROKEN=str(broken))
    async with engine.client() as rt:
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
    assert run_states(store, "t4") == [
        "pending",
        "running",
        "failed",
        "pending",
        "running",
        "completed",
    ]
