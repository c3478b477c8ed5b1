"""A multi-step run with an approval, on the real Temporal dev server."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import temporal_agents

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.temporal import TemporalEngine

from .executions import tool_counts


async def test_multi_step_run_with_approval(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    tools = tmp_path / "tools.db"
    start_worker(queue, url, NBDURABLE_TEST_TOOLS=str(tools))
    store = nd.open_store(url)
    engine = TemporalEngine(address=temporal_server, task_queue=queue, heartbeat_timeout=2)
    async with DurableRuntime(store=store, agents=temporal_agents.agents, engine=engine) as rt:
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
