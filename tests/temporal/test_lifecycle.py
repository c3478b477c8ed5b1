"""Cancel and model retry on the real Temporal dev server: the embedded engine's states."""

from __future__ import annotations

import asyncio

import pytest
from support.executions import started, tool_rows
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import CancelledError

import nbdurable as nd

from .conftest import Cluster


async def test_cancel_mid_tool_ends_cancelled(cluster: Cluster) -> None:
    tools = cluster.tools
    cluster.worker(slow=30)
    async with cluster.runtime(heartbeat_timeout=2) as rt:
        run = await rt.submit("crashy", "Do the three steps.")
        await started(tools, "slow_step")
        await run.cancel()
        record = await asyncio.wait_for(run.wait(), 30)
        assert record.state == "cancelled"
        with pytest.raises(nd.RunFailedError):
            await run.result()
        handle = (await rt.engine.client()).get_workflow_handle(run.run_id)
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 30)  # the workflow itself ends cancelled
        assert isinstance(failure.value.cause, CancelledError)
    assert [tool for tool, _ in tool_rows(tools)] == ["step", "slow_step"]


async def test_model_retry_waits_then_completes(cluster: Cluster) -> None:
    cluster.worker()
    store = cluster.store
    async with cluster.runtime() as rt:
        run = await rt.submit("flaky", "Answer, eventually.")
        waiting = await asyncio.wait_for(run.wait("retry_wait"), 30)
        assert waiting.model_attempts == 1 and waiting.next_attempt_at is not None
        assert waiting.error is not None and "503" in waiting.error
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Answered on a later attempt."
        events = [e.type for e in store.read_events(run.run_id)]
        assert events.count("model_attempt_failed") == 1
        assert events.count("model_completed") == 1


async def test_model_error_without_retry_fails_the_run(cluster: Cluster) -> None:
    cluster.worker()
    async with cluster.runtime() as rt:
        run = await rt.submit("fragile", "Answer once.")
        record = await asyncio.wait_for(run.wait(), 30)
        assert record.state == "failed" and record.reason == "model_error"
        assert record.error is not None and "503" in record.error
