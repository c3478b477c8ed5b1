"""A worker stopped with SIGTERM drains: its calls in flight finish, then its runs go back.

Real `nbdurable worker` processes on one SQLite store; the tools log their
starts and ends (support.drain_agents).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

from support import drain_agents
from support.drain_agents import lines
from support.runtime_harness import worker

import nbdurable as nd
from nbdurable.runtime import DurableRuntime, Run

AGENTS = "support.drain_agents:agents"


def _states(store: nd.SessionStore, run_id: str) -> list[str]:
    return [e.payload["state"] for e in store.read_events(run_id) if e.type == "run_state"]


async def _started(log: Path, count: int = 1) -> None:
    """Wait until ``count`` tool executions started."""
    for _ in range(1500):
        if sum(kind == "start" for kind, _ in lines(log)) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no tool started: {lines(log)}")


def _stopped(proc: subprocess.Popen[str], *signals: signal.Signals) -> tuple[float, str]:
    """Send ``signals`` (0.3 s apart); seconds until the process exited, and its output."""
    began = time.monotonic()
    for k, signum in enumerate(signals):
        if k:
            time.sleep(0.3)
        proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return time.monotonic() - began, out + err


async def _submit(url: str, agent: str) -> tuple[nd.SessionStore, Run]:
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=drain_agents.agents)  # submits only
    return store, await client.submit(agent, "Do the long job.")


async def _finish_elsewhere(url: str, log: Path) -> None:
    again = worker(url, log, "--exit-when-idle", agents=AGENTS, lease_ms=2000)
    again.communicate(timeout=60)


async def test_sigterm_lets_the_call_finish_once_then_hands_the_run_back(tmp_path: Path) -> None:
    url, log = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "tools.log"
    store, run = await _submit(url, "drain_manual")
    proc = worker(url, log, agents=AGENTS, lease_ms=2000)
    await _started(log)
    seconds, output = _stopped(proc, signal.SIGTERM)
    assert seconds < 10  # the 4-s call's rest, well inside the 25-s drain
    assert [kind for kind, _ in lines(log)] == ["start", "end"]
    record = run.record()
    assert record.state == "pending" and record.lease_owner is None, record
    assert "released" in output and "cut" not in output
    (intent,) = store.rt_intents(run.run_id)  # type: ignore[attr-defined]
    assert intent.state == "completed"  # its result is journaled: the next owner reuses it
    await _finish_elsewhere(url, log)
    assert run.record().state == "completed"
    assert [kind for kind, _ in lines(log)] == ["start", "end"]  # no second start
    assert "needs_attention" not in _states(store, run.run_id)
    store.close()


async def test_a_drain_shorter_than_the_call_cuts_a_safe_call_and_it_runs_again(
    tmp_path: Path,
) -> None:
    url, log = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "tools.log"
    store, run = await _submit(url, "drain_safe")
    proc = worker(url, log, "--drain-seconds", "1", agents=AGENTS, lease_ms=2000)
    await _started(log)
    seconds, output = _stopped(proc, signal.SIGTERM)
    assert seconds < 3.5
    assert "cut" in output and "long_safe" in output, output
    assert run.record().state == "pending"
    await _finish_elsewhere(url, log)
    assert run.record().state == "completed"
    assert [kind for kind, _ in lines(log)] == ["start", "start", "end"]  # safe: run again
    store.close()


async def test_a_drain_shorter_than_the_call_cuts_a_manual_call_for_a_human(
    tmp_path: Path,
) -> None:
    url, log = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "tools.log"
    store, run = await _submit(url, "drain_manual")
    proc = worker(url, log, "--drain-seconds", "1", agents=AGENTS, lease_ms=2000)
    await _started(log)
    _, output = _stopped(proc, signal.SIGTERM)
    assert "cut" in output and "long_manual" in output, output
    await _finish_elsewhere(url, log)
    record = run.record()
    assert record.state == "needs_attention" and "long_manual" in (record.reason or "")
    assert [kind for kind, _ in lines(log)] == ["start"]  # never re-run on its own
    store.close()


async def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    url, log = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "tools.log"
    store, run = await _submit(url, "drain_safe")
    proc = worker(url, log, agents=AGENTS, lease_ms=2000)
    await _started(log)
    seconds, output = _stopped(proc, signal.SIGTERM, signal.SIGINT)
    assert seconds < 2.5  # not the call's 4 s, nor the 25-s drain
    assert "cut" in output and "long_safe" in output, output
    assert [kind for kind, _ in lines(log)] == ["start"]
    assert run.record().state == "pending"
    store.close()
