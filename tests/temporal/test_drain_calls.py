"""A Temporal worker told to drain starts no tool call, and leaves no workflow task behind (issue 39).

The call in flight at SIGTERM finishes there; the step's next call (inside the
same ``model_step`` activity) and the next step's ``manual`` call start on the
other worker, once each, so none is cut into ``needs_attention``; no workflow
task times out or fails on the way.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from support import temporal_drain
from support.drain_agents import lines
from support.executions import run_states
from support.temporal_histories import broken_workflow_tasks

from nbdurable.runtime import DurableRuntime
from nbdurable.temporal import TemporalEngine

from .conftest import Cluster

SERVED = ["--agents", "support.temporal_drain:agents"]


@pytest.mark.parametrize(
    ("agent", "text"), [("drain_pair", "both done"), ("drain_then_manual", "settled")]
)
async def test_no_call_starts_on_a_draining_worker(cluster: Cluster, agent: str, text: str) -> None:
    log = cluster.tools.parent / "tools.log"
    env = {"NBDURABLE_TEST_LOG": str(log), "NBDURABLE_TEST_SLOW": "3"}
    first = cluster.worker(args=SERVED, **env)
    engine = TemporalEngine(address=cluster.address, task_queue=cluster.queue)
    async with DurableRuntime(
        store=cluster.store, agents=temporal_drain.agents, engine=engine
    ) as rt:
        run = await rt.submit(agent, "Do the long jobs.")
        while not lines(log):
            await asyncio.sleep(0.02)
        os.kill(first.proc.pid, signal.SIGTERM)
        second = cluster.worker(args=SERVED, **env)
        output, _ = await asyncio.to_thread(first.proc.communicate, timeout=60)
        assert first.proc.returncode == 0 and "cut" not in output, output
        result = await asyncio.wait_for(run.result(), 90)
    assert result.text == text
    one, two = str(first.proc.pid), str(second.proc.pid)
    # the call in flight ends where it began; the next one starts on the other worker
    assert lines(log) == [("start", one), ("end", one), ("start", two), ("end", two)]
    assert "needs_attention" not in run_states(cluster.store, run.run_id)
    assert await broken_workflow_tasks(cluster.address, cluster.queue) == []
