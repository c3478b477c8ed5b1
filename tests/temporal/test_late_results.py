"""A Temporal worker paused past its heartbeat timeout in a manual tool, then woken.

The activity is lost (its heartbeat timed out), so the run parks in
``needs_attention`` without a new fencing token. Woken before the run is
retried, the paused worker's result is the call's (its write is not refused):
the retry reuses it and the tool runs once. Woken after the retried leg took
the run (a new token) and ran the call again, its write is refused and its
result is kept as a late result, as on the embedded engine.

The paused worker's pollers still hold the server's connections: the run's next
workflow task goes to one of them and waits out the workflow task timeout (once
or twice: its sticky queue, then the task queue) before the other worker gets
it. The runs here start with a timeout of 3 s, not the server's 10.
"""

from __future__ import annotations

import asyncio
import os
import signal

from support.executions import started, tool_rows
from support.waiting import eventually

import nbdurable as nd

from .conftest import Cluster


async def _parked(cluster: Cluster, rt: nd.DurableRuntime) -> tuple[nd.runtime.Run, int]:
    """The ``careful`` run, its worker paused mid-tool until the run needs attention."""
    first = cluster.worker(slow=4)
    run = await rt.submit("careful", "Do the manual step.")
    await started(cluster.tools)
    os.kill(first.proc.pid, signal.SIGSTOP)
    cluster.worker(slow=0.1)
    record = await asyncio.wait_for(run.wait("needs_attention", "completed", "failed"), 60)
    assert record.state == "needs_attention", record
    return run, first.proc.pid


async def test_woken_before_the_retry_its_result_is_the_calls(cluster: Cluster) -> None:
    store = cluster.store
    async with cluster.runtime(heartbeat_timeout=1.5, workflow_task_timeout=3) as rt:
        run, paused = await _parked(cluster, rt)
        os.kill(paused, signal.SIGCONT)
        # its tool finishes and records its result (same token): not a late one
        await eventually(
            lambda: [i.state for i in store.rt_intents(run.run_id)] == ["completed"], 30
        )
        assert store.rt_get(run.run_id).late_results == []
        await run.retry()
        result = await asyncio.wait_for(run.result(), 60)
    assert result.text == "Manual step settled."
    assert len(tool_rows(cluster.tools)) == 1  # the retry reused it: the tool ran once


async def test_woken_after_the_retried_leg_ran_it_its_result_is_kept_late(
    cluster: Cluster,
) -> None:
    store = cluster.store
    async with cluster.runtime(heartbeat_timeout=1.5, workflow_task_timeout=3) as rt:
        run, paused = await _parked(cluster, rt)
        try:
            await run.retry()
            result = await asyncio.wait_for(run.result(), 60)
        finally:
            os.kill(paused, signal.SIGCONT)
        assert result.text == "Manual step settled."
        # the woken worker sleeps out its tool, then records: slow under a loaded CI
        deadline = asyncio.get_running_loop().time() + 60
        while not store.rt_get(run.run_id).late_results:
            assert asyncio.get_running_loop().time() < deadline, "no late result"
            await asyncio.sleep(0.1)
    [late] = store.rt_get(run.run_id).late_results
    assert late.outcome == "result" and late.result is not None
    assert late.result["result"] == "manual step 1 done" and late.fence < run.record().fence
    assert len(tool_rows(cluster.tools)) == 2  # it ran twice: the late result says so
    assert "already ran once" in str(nd.inspect.explain(store, run.run_id))
