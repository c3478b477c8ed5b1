"""Every engine: a worker stopped with SIGTERM drains.

The call in flight finishes (once) and the run goes on elsewhere; a drain shorter
than the call cuts it and the tool's recovery policy decides on the next worker;
a second signal exits at once. The tools log their starts and ends
(support.drain_agents).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from support import drain_agents
from support.drain_agents import lines
from support.executions import run_states
from support.workers import Worker

from .conftest import EngineCase

SERVED = ["--agents", "support.drain_agents:agents"]


def _worker(engine: EngineCase, *args: str) -> Worker:
    return engine.worker(args=[*SERVED, *args], tasks=False, NBDURABLE_TEST_LOG=str(_log(engine)))


def _log(engine: EngineCase) -> os.PathLike[str]:
    return engine.tools.parent / "tools.log"


async def _started(engine: EngineCase) -> None:
    for _ in range(1500):
        if any(kind == "start" for kind, _ in lines(_log(engine))):
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


async def test_sigterm_lets_the_call_finish_once(engine: EngineCase) -> None:
    first = _worker(engine)
    async with engine.client(agents=drain_agents.agents) as rt:
        run = await rt.submit("drain_manual", "Do the long job.")
        await _started(engine)
        began = await _signal(first, signal.SIGTERM)
        _worker(engine)  # the run goes on here once the first one leaves
        seconds, output = await _exited(first, began)
        assert first.proc.returncode == 0, output
        assert seconds < 10, output  # the call's rest, well inside the 25-s drain
        assert "cut" not in output
        result = await asyncio.wait_for(run.result(), 60)
        assert result.text == "drained by hand"
    assert [kind for kind, _ in lines(_log(engine))] == ["start", "end"]  # once, to its end
    assert "needs_attention" not in run_states(engine.store, run.run_id)


@pytest.mark.parametrize("recovery", ["safe", "manual"])
async def test_a_drain_shorter_than_the_call_cuts_it_and_recovery_decides(
    engine: EngineCase, recovery: str
) -> None:
    first = _worker(engine, "--drain-seconds", "1")
    async with engine.client(agents=drain_agents.agents) as rt:
        run = await rt.submit(f"drain_{recovery}", "Do the long job.")
        await _started(engine)
        began = await _signal(first, signal.SIGTERM)
        _worker(engine)
        seconds, output = await _exited(first, began)
        assert seconds < 5, output
        assert "cut" in output and f"long_{recovery}" in output, output
        record = await asyncio.wait_for(run.wait("needs_attention", "completed", "failed"), 60)
    kinds = [kind for kind, _ in lines(_log(engine))]
    if recovery == "safe":  # started again on the other worker
        assert record.state == "completed", record
        assert kinds == ["start", "start", "end"]
    else:  # a human decides
        assert record.state == "needs_attention", record
        assert "long_manual" in (record.reason or "")
        assert kinds == ["start"]


async def test_a_second_signal_exits_at_once(engine: EngineCase) -> None:
    first = _worker(engine)
    async with engine.client(agents=drain_agents.agents) as rt:
        await rt.submit("drain_safe", "Do the long job.")
        await _started(engine)
        began = await _signal(first, signal.SIGTERM, signal.SIGINT)
        seconds, output = await _exited(first, began)
        assert seconds < 2.5, output  # not the call's 4 s, nor the 25-s drain
        assert first.proc.returncode == 0, output
        assert "cut" in output and "long_safe" in output, output
    assert [kind for kind, _ in lines(_log(engine))] == ["start"]
