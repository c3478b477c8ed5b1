"""A step is one activity when its calls run unattended; a lost worker never asks the model twice."""

from __future__ import annotations

import asyncio
from collections import Counter

from support.executions import started, tool_counts, tool_rows

from .conftest import Cluster


async def _activities(rt: object, run_id: str) -> Counter[str]:
    """The activity types the run's workflow scheduled (server round trips), counted."""
    engine = rt.engine  # type: ignore[attr-defined]
    handle = (await engine.client()).get_workflow_handle(run_id)
    scheduled: Counter[str] = Counter()
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled[event.activity_task_scheduled_event_attributes.activity_type.name] += 1
    return scheduled


async def test_a_step_of_safe_calls_is_one_activity(cluster: Cluster) -> None:
    cluster.worker()
    async with cluster.runtime() as rt:
        run = await rt.submit("many", "Two steps.")
        assert (await asyncio.wait_for(run.result(), 60)).text == "ok"
        scheduled = await _activities(rt, run.run_id)
    # three model calls (two steps with a call each, then the answer), no run_tool
    assert scheduled == Counter({"nbdurable.model_step": 3})
    assert sorted(tool_counts(cluster.tools).values()) == [1, 1]
    events = cluster.store.read_events(run.run_id)
    results = [e for e in events if e.type == "tool_result"]
    assert [e.payload["result"]["result"] for e in results] == ["step 1 done", "step 2 done"]


async def test_a_gated_call_keeps_its_step_to_the_workflow(cluster: Cluster) -> None:
    cluster.worker()
    async with cluster.runtime() as rt:
        run = await rt.submit("janitor", "Clean up stale staging tables.")
        await asyncio.wait_for(run.wait("waiting_approval"), 60)
        assert not any(tool == "drop_table" for tool, _ in tool_rows(cluster.tools))
        await run.approve()
        await asyncio.wait_for(run.result(), 60)
        scheduled = await _activities(rt, run.run_id)
    # the approved call ran as its own activity; the safe steps inside the model's
    assert scheduled["nbdurable.run_tool"] == 1
    assert set(tool_counts(cluster.tools).values()) == {1}


async def test_a_worker_lost_during_a_step_activity_never_asks_the_model_again(
    cluster: Cluster,
) -> None:
    first = cluster.worker(slow=30)
    async with cluster.runtime(heartbeat_timeout=1.5) as rt:
        run = await rt.submit("crashy", "Do the three steps.")
        await started(cluster.tools, "slow_step")
        first.kill()  # SIGKILL while the slow step runs inside the step's activity
        cluster.worker(slow=0.1)
        assert (await asyncio.wait_for(run.result(), 60)).text == "All three steps done."
    events = cluster.store.read_events(run.run_id)
    attempts = Counter(e.step_index for e in events if e.type == "model_attempt_started")
    assert attempts == Counter({0: 1, 1: 1, 2: 1, 3: 1})  # the journaled response was reused
    by_tool = Counter(tool for tool, _ in tool_rows(cluster.tools))
    assert by_tool == Counter({"step": 2, "slow_step": 2})  # only the interrupted call again
