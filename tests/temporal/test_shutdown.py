"""A Temporal worker stopped with SIGTERM after executing runs exits 0 (no SIGABRT at teardown)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from support import temporal_agents

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.temporal import TemporalEngine


async def test_worker_exits_cleanly_after_runs(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    codes = []
    for k in range(4):  # the teardown abort hit about one stop in four before the fix
        queue = f"q-{uuid.uuid4().hex[:8]}"
        url = f"sqlite:///{tmp_path / f'runs-{k}.db'}"
        worker = start_worker(queue, url)
        store = nd.open_store(url)
        engine = TemporalEngine(address=temporal_server, task_queue=queue)
        async with DurableRuntime(store=store, agents=temporal_agents.agents, engine=engine) as rt:
            run = await rt.submit("many", "Run once.")
            assert (await asyncio.wait_for(run.result(), 30)).text == "ok"
        worker.stop()
        codes.append(worker.proc.returncode)
    assert codes == [0, 0, 0, 0]
