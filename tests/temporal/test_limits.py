"""A run's timeout and the worker's limits on Temporal: the embedded engine's states."""

from __future__ import annotations

import asyncio
import time

import pytest
from support.executions import tool_rows

from .conftest import Cluster


# serial: the 3-s run timeout starts at submit, before the worker process is up; under
# load the timer can fire before the slow step starts
@pytest.mark.serial
async def test_timeout_fails_the_run_mid_tool(cluster: Cluster) -> None:
    tools = cluster.tools
    cluster.worker(slow=60)
    async with cluster.runtime(heartbeat_timeout=2) as rt:
        began = time.monotonic()
        run = await rt.submit("crashy", "Do the three steps.", timeout=3)
        record = await asyncio.wait_for(run.wait(), 30)
        assert record.state == "failed" and record.reason == "timeout"
        assert time.monotonic() - began < 20  # the timer fired; the 60 s tool was not awaited
        handle = (await rt.engine.client()).get_workflow_handle(run.run_id)
        assert await asyncio.wait_for(handle.result(), 30) == "failed"
    # the slow step started and was abandoned; the third step never ran
    assert [tool for tool, _ in tool_rows(tools)] == ["step", "slow_step"]


async def test_deadline_passed_before_the_first_leg(cluster: Cluster) -> None:
    tools = cluster.tools
    async with cluster.runtime() as rt:
        run = await rt.submit("many", "Two steps.", timeout=0.5)
        await asyncio.sleep(1.0)  # no worker polls the queue yet
        cluster.worker()
        record = await asyncio.wait_for(run.wait(), 30)
        assert record.state == "failed" and record.reason == "timeout"
    assert tool_rows(tools) == []


async def test_max_operations_fails_the_run(cluster: Cluster) -> None:
    tools = cluster.tools
    cluster.worker(args=["--max-operations", "5"])
    async with cluster.runtime() as rt:
        run = await rt.submit("busy", "Eight steps, please.")
        record = await asyncio.wait_for(run.wait(), 30)
    # model, step, model, step, model: the sixth operation (a tool call) is refused
    assert record.state == "failed" and record.reason == "limit_exceeded"
    assert record.error is not None and "max_operations" in record.error
    assert record.operations == 5
    assert len(tool_rows(tools)) == 2


async def test_max_payload_bytes_fails_the_run(cluster: Cluster) -> None:
    cluster.worker(args=["--max-payload-bytes", "2000"])
    store = cluster.store
    async with cluster.runtime() as rt:
        run = await rt.submit("verbose", "Say a lot.")
        record = await asyncio.wait_for(run.wait(), 30)
    assert record.state == "failed" and record.reason == "limit_exceeded"
    assert record.error is not None and "max_payload_bytes" in record.error
    assert store.load(run.run_id) is None  # the oversized checkpoint was never written
