"""A Temporal worker stopped with SIGTERM drains: activities in flight finish, not cancelled.

Real `nbdurable worker --engine temporal` processes on one task queue; the
tools log their starts and ends (support.drain_agents).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from support import drain_agents
from support.drain_agents import lines
from support.executions import run_states

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.temporal import TemporalEngine

from .conftest import Worker

SERVED = ["--agents", "support.drain_agents:agents"]


class _Slice:
    """A task queue, a store and a tool log of this test's own."""

    def __init__(self, address: str, start_worker: Any, tmp_path: Path) -> None:
        self.address, self.start = address, start_worker
        self.queue = f"q-{uuid.uuid4().hex[:8]}"
        self.url = f"sqlite:///{tmp_path / 'runs.db'}"
        self.log = tmp_path / "tools.log"
        self.store = nd.open_store(self.url)

    def worker(self, *args: str) -> Worker:
        worker: Worker = self.start(
            self.queue, self.url, args=[*SERVED, *args], NBDURABLE_TEST_LOG=str(self.log)
        )
        return worker

    def runtime(self) -> DurableRuntime:
        engine = TemporalEngine(address=self.address, task_queue=self.queue, heartbeat_timeout=2)
        return DurableRuntime(store=self.store, agents=drain_agents.agents, engine=engine)

    async def started(self) -> None:
        for _ in range(1500):
            if any(kind == "start" for kind, _ in lines(self.log)):
                return
            await asyncio.sleep(0.02)
        raise AssertionError("no tool started")


async def _signal(worker: Worker, *signals: signal.Signals) -> float:
    """Send ``signals`` (0.3 s apart); when the first was sent (monotonic seconds)."""
    began = time.monotonic()
    for k, signum in enumerate(signals):
        if k:
            await asyncio.sleep(0.3)
        os.kill(worker.proc.pid, signum)
    return began


async def _exited(worker: Worker, began: float) -> tuple[float, str]:
    """Seconds from ``began`` until the worker exited, and its output."""
    output, _ = await asyncio.to_thread(worker.proc.communicate, timeout=60)
    return time.monotonic() - began, output


async def test_sigterm_lets_the_activity_finish_once(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    cluster = _Slice(temporal_server, start_worker, tmp_path)
    first = cluster.worker()
    async with cluster.runtime() as rt:
        run = await rt.submit("drain_manual", "Do the long job.")
        await cluster.started()
        began = await _signal(first, signal.SIGTERM)
        cluster.worker()  # the workflow goes on here once the first one leaves
        seconds, output = await _exited(first, began)
        assert first.proc.returncode == 0, output
        assert seconds < 10, output  # the call's rest, well inside the 25-s drain
        assert "cut" not in output
        result = await asyncio.wait_for(run.result(), 60)
        assert result.text == "drained by hand"
    assert [kind for kind, _ in lines(cluster.log)] == ["start", "end"]  # once, to its end
    assert "needs_attention" not in run_states(cluster.store, run.run_id)
    cluster.store.close()


@pytest.mark.parametrize("recovery", ["safe", "manual"])
async def test_a_drain_shorter_than_the_call_cuts_it_and_recovery_decides(
    temporal_server: str, start_worker: Any, tmp_path: Path, recovery: str
) -> None:
    cluster = _Slice(temporal_server, start_worker, tmp_path)
    first = cluster.worker("--drain-seconds", "1")
    async with cluster.runtime() as rt:
        run = await rt.submit(f"drain_{recovery}", "Do the long job.")
        await cluster.started()
        began = await _signal(first, signal.SIGTERM)
        cluster.worker()
        seconds, output = await _exited(first, began)
        assert seconds < 5, output
        assert "cut" in output and f"long_{recovery}" in output, output
        record = await asyncio.wait_for(run.wait("needs_attention", "completed", "failed"), 60)
    kinds = [kind for kind, _ in lines(cluster.log)]
    if recovery == "safe":  # started again on the other worker
        assert record.state == "completed", record
        assert kinds == ["start", "start", "end"]
    else:  # a human decides
        assert record.state == "needs_attention", record
        assert kinds == ["start"]
    cluster.store.close()


async def test_a_second_signal_exits_at_once(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    cluster = _Slice(temporal_server, start_worker, tmp_path)
    first = cluster.worker()
    async with cluster.runtime() as rt:
        await rt.submit("drain_safe", "Do the long job.")
        await cluster.started()
        began = await _signal(first, signal.SIGTERM, signal.SIGTERM)
        seconds, output = await _exited(first, began)
        assert seconds < 2.5, output
        assert first.proc.returncode == 0, output
        assert "cut" in output and "long_safe" in output, output
    assert [kind for kind, _ in lines(cluster.log)] == ["start"]
    cluster.store.close()
