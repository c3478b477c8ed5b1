"""A Temporal run seen from a notebook-like client: inspect, explain, reconnect by offset."""

from __future__ import annotations

import asyncio

import pytest

import nbdurable as nd

from .conftest import Cluster

pytest.importorskip("pandas")


async def test_notebook_client_inspects_and_reconnects(cluster: Cluster) -> None:
    cluster.worker()
    store = cluster.store
    async with cluster.runtime() as rt:
        run = await rt.submit("janitor", "Clean up stale staging tables.")
        seen = []
        async for event in run.stream():  # 1-2: keep the run id and each offset
            seen.append(event.offset)
            if event.type == "tool_approval_request":
                break
        saved = seen[-1]
        await run.wait("waiting_approval")
        await run.approve()
        await asyncio.wait_for(run.result(), 30)
        # 3-4: a new client reconnects by offset: only what came after, no gap
        client = await rt.get_run(run.run_id)
        rest = [e async for e in client.stream(after=saved)]
        assert rest and rest[0].offset == saved + 1
        assert [e.offset for e in rest] == list(range(saved + 1, saved + 1 + len(rest)))
        assert rest[-1].type == "run_finished" and rest[-1].payload["state"] == "completed"
        assert rest[-2].type == "run_state" and rest[-2].payload["state"] == "completed"
        # a finished run still replays from 0
        everything = [e async for e in client.stream(after=0)]
        assert len(everything) == saved + len(rest)
    history = nd.inspect.history(store, run.run_id)
    assert list(history.index) == [0, 1, 2, 3]
    assert "drop_table" in str(list(history["tool_calls"])[1])
    runs = nd.inspect.runs(store)
    assert run.run_id in set(runs.index)
    text = str(nd.inspect.explain(store, run.run_id))
    assert "completed" in text and "agent 'janitor'" in text
