"""A standing approval on the Temporal engine: granted while the run waits, it settles
the waiting call and covers the later ones (the next leg's input carries it)."""

from __future__ import annotations

import asyncio

from support.executions import tool_counts

from .conftest import Cluster


async def test_a_grant_covers_calls_on_temporal(cluster: Cluster) -> None:
    cluster.worker()
    store = cluster.store
    async with cluster.runtime(heartbeat_timeout=2) as rt:
        run = await rt.submit("warden", "Drop the staging tables.")
        await asyncio.wait_for(run.wait("waiting_approval"), 30)
        [request] = await run.pending_approvals()
        assert request.input == {"name": "stg_1"}
        grant = await run.grant("drop_table", minutes=30, match={"name": "stg_*"}, by="ana")
        result = await asyncio.wait_for(run.result(), 60)
    assert result.text == "Dropped three staging tables."
    counts = tool_counts(cluster.tools)
    assert len(counts) == 3 and set(counts.values()) == {1}
    events = list(store.read_events(run.run_id))
    requests = [e for e in events if e.type == "tool_approval_request"]
    assert len(requests) == 1  # only the call made before the grant
    resolved = [e.payload for e in events if e.type == "approval_resolved"]
    assert len(resolved) == 3
    assert {p["source"]["grant_id"] for p in resolved} == {grant.grant_id}
    assert {p["source"]["via"] for p in resolved} == {"grant"}
    assert {p["source"]["by"] for p in resolved} == {"ana"}
    states = [e.payload["state"] for e in events if e.type == "run_state"]
    assert states.count("waiting_approval") == 1
