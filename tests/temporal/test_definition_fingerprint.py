"""Temporal workers execute a run only with the definition it was submitted under (issue 16).

Workers of one task queue that disagree about ``cleaner`` v1: the one whose
definition differs neither runs the workflow's leg nor any of its activities (it
hands them back untouched); the run waits, with its waiting reason, for a worker
with the submitted definition, and never fails for it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

from support import temporal_definitions
from temporalio.client import Client

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.temporal import TemporalEngine
from nbdurable.temporal.devserver import DevServer
from nbdurable.temporal.driver import DEFINITION_MISMATCH

from .conftest import Cluster, Worker
from .executions import tool_rows

REASON = "waits for a runtime whose cleaner v1 matches the submitted definition"
X = ["--agents", "support.temporal_definitions:cleaner_x"]
Y = ["--agents", "support.temporal_definitions:cleaner_y"]


def client(cluster: Cluster) -> DurableRuntime:
    """A notebook's runtime: it defines cleaner X and dispatches to the cluster's queue."""
    engine = TemporalEngine(address=cluster.address, task_queue=cluster.queue)
    return DurableRuntime(store=cluster.store, agents=temporal_definitions.cleaner_x, engine=engine)


async def until(check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.1)


async def test_a_worker_with_another_definition_leaves_the_run_pending(cluster: Cluster) -> None:
    other = cluster.worker(args=Y)
    async with client(cluster) as rt:
        run = await rt.submit("cleaner", "Clean up.", run_id="run-x")
        store = cluster.store
        await until(lambda: store.rt_get("run-x").waiting_reason == REASON, 30)
        await asyncio.sleep(3)  # the workflow keeps coming back to the only worker
        record = store.rt_get("run-x")
        assert record.state == "pending" and record.fence == 0
        assert store.load("run-x") is None and tool_rows(cluster.tools) == []
        assert REASON in str(nd.inspect.explain(store, "run-x"))

        matching = cluster.worker(args=X)
        result = await asyncio.wait_for(run.result(), 90)
        assert result.text == "Cleaner X swept stg_a."
        done = store.rt_get("run-x")
        assert done.state == "completed" and done.waiting_reason is None
    pids = {pid for _tool, pid in tool_rows(cluster.tools)}
    assert tool_rows(cluster.tools) == [("sweep", matching.proc.pid)] and pids != {other.proc.pid}


async def test_activities_a_mismatched_worker_picks_up_are_handed_back(
    tmp_path: Path, cluster: Cluster
) -> None:
    # A server of its own that dispatches every activity through the task queue (the
    # dev server's default hands a workflow's activities to the worker that scheduled
    # them, so the other worker would never see one).
    eager_off = ["--dynamic-config-value", "system.enableActivityEagerExecution=false"]
    with DevServer(tmp_path / "dev.db", extra_args=eager_off) as server:
        here = replace(cluster, address=server.address)
        env = {"NBDURABLE_TEST_TOOLS": str(cluster.tools)}
        workers = [Worker(here.address, here.queue, here.url, env, args=a) for a in (Y, X)]
        try:
            async with client(here) as rt:
                runs = [await rt.submit("cleaner", f"Clean up {i}.") for i in range(6)]
                # 9-55 s here; a loaded CI machine (the whole suite's processes) took
                # over 300 s twice. The mismatched worker is the one free to poll (it
                # hands work back at once), so it tends to take the retries too, and each
                # hand-back waits up to 10 s before the next try.
                results = await asyncio.wait_for(asyncio.gather(*(r.result() for r in runs)), 480)
            handed_back, moved = await _hand_backs(server.address, here.queue)
        finally:
            for worker in workers:
                worker.stop()
    assert {r.text for r in results} == {"Cleaner X swept stg_a."}
    rows = tool_rows(cluster.tools)
    assert len(rows) == 6 and {pid for _tool, pid in rows} == {workers[1].proc.pid}
    # the other worker took model or tool calls and workflow tasks, and gave them back
    assert handed_back > 0 and moved > 0, (handed_back, moved)


async def _hand_backs(address: str, queue: str) -> tuple[int, int]:
    """Activities handed back, and runs continued as new, in the queue's workflow histories."""
    temporal = await Client.connect(address)
    handed_back = moved = 0
    async for execution in temporal.list_workflows(f"TaskQueue = '{queue}'"):
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        async for event in handle.fetch_history_events():
            if event.HasField("activity_task_failed_event_attributes"):
                failure = event.activity_task_failed_event_attributes.failure
                handed_back += failure.application_failure_info.type == DEFINITION_MISMATCH
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                moved += 1
    return handed_back, moved
