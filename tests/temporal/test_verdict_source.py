"""Who decided, on the Temporal engine: the verdict's source reaches the record and the event."""

from __future__ import annotations

import asyncio

from .conftest import Cluster


async def test_a_verdicts_source_is_recorded_on_the_temporal_engine(cluster: Cluster) -> None:
    cluster.worker()
    store = cluster.store
    async with cluster.runtime(heartbeat_timeout=2) as rt:
        run = await rt.submit("janitor", "Clean up stale staging tables.", submitted_by="ana")
        await asyncio.wait_for(run.wait("waiting_approval"), 30)
        (request,) = await run.pending_approvals()
        await run.approve(by="lee", via="cli")
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Done: dropped stg_2023."
        record = run.record()
    assert record.submitted_by == "ana"
    source = record.decided[request.approval_id].source.model_dump(mode="json")
    assert (source["by"], source["via"], source["authenticated"]) == ("lee", "cli", False)
    [resolved] = [e for e in store.read_events(run.run_id) if e.type == "approval_resolved"]
    assert resolved.payload["source"] == source
