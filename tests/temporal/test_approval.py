"""A multi-step run with an approval, on the real Temporal dev server."""

from __future__ import annotations

import asyncio

from support.executions import tool_counts

from .conftest import Cluster


async def test_multi_step_run_with_approval(cluster: Cluster) -> None:
    tools = cluster.tools
    cluster.worker()
    store = cluster.store
    async with cluster.runtime(heartbeat_timeout=2) as rt:
        run = await rt.submit("janitor", "Clean up stale staging tables.")
        record = await asyncio.wait_for(run.wait("waiting_approval"), 30)
        assert record.state == "waiting_approval"
        (request,) = await run.pending_approvals()
        assert request.tool_name == "drop_table"
        await run.approve()
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Done: dropped stg_2023."
        counts = tool_counts(tools)
        assert len(counts) == 3 and set(counts.values()) == {1}
        events = [e.type for e in store.read_events(run.run_id)]
        assert "checkpoint_saved" in events and "model_delta" in events
        offsets = [e.offset for e in store.read_events(run.run_id)]
        assert offsets == list(range(1, len(offsets) + 1))
