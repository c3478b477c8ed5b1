"""Takeovers with real worker processes, on SQLite and PostgreSQL.

A worker paused past its lease (SIGSTOP) while its ``manual`` tool runs: another
worker takes the run over and parks it in ``needs_attention``; a human retries; a
third worker runs the call again; the paused worker wakes (SIGCONT). With
``ctx.ensure_owner()`` right before its side effect, the effect happens exactly once
and the paused worker's result is never recorded (benchmarks/lease_pause_torture.py
repeats this many times). A worker SIGKILLed on this host is taken over at once,
not after its 30 s lease.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from support import lease_agents
from support.lease_harness import kill_trial, pause_trial, wait_for, worker

import nbdurable as nd
from nbdurable.runtime import DurableRuntime

pytestmark = pytest.mark.serial  # it times a takeover against the lease

DEFAULT_LEASE = 30_000


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_database"))
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.mark.parametrize(("agent", "wake"), [("careful", "after"), ("threaded", "during")])
async def test_a_paused_worker_that_checks_its_lease_acts_once_after_a_takeover(
    tmp_path: Path, url: str, agent: str, wake: str
) -> None:
    trial = await pause_trial(url, tmp_path / "log", agent, wake=wake)
    assert trial.effects == 1, trial
    assert trial.final_state == "completed" and trial.fence == 3
    assert trial.recorded_by == trial.retried_pid != trial.paused_pid  # never the stale result
    assert trial.stale_errors == []  # the paused worker stopped cleanly
    # the human was told the first call may still have been running
    assert "may have run twice" in trial.attention_reason
    assert "may have run twice" in trial.explained
    [takeover] = trial.takeovers
    assert takeover["cause"] == "lease_lapsed"
    assert takeover["step_index"] == 0
    assert f"pid {trial.paused_pid} " in str(takeover["message"])
    assert "Taken over from" in trial.explained


async def _killed_mid_tool(url: str, log: Path, run_id: str) -> None:
    """Start a worker (default lease) on the run and SIGKILL it inside its tool."""
    owner = worker(url, log, lease_ms=DEFAULT_LEASE, tool_seconds=60)
    await wait_for(lambda: owner.pid in lease_agents.starts(log), 60, "the owner's tool")
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=30)


async def test_a_killed_owner_on_this_host_is_taken_over_at_once(tmp_path: Path, url: str) -> None:
    log = tmp_path / "log"
    trial = await kill_trial(url, log, lease_ms=DEFAULT_LEASE)
    assert trial.seconds <= 3.0, f"took over after {trial.seconds:.2f} s"
    assert trial.final_state == "completed", trial.taker_errors
    store = nd.open_store(url)
    record = store.rt_get(trial.run_id)
    assert record.previous_owner is not None and f":{trial.owner_pid}#" in record.previous_owner
    events = await nd.read_events(store, trial.run_id)
    [takeover] = [e for e in events if e.type == "run_taken_over"]
    assert takeover.payload["cause"] == "owner_gone"
    assert takeover.step_index == takeover.payload["step_index"] == 0
    assert takeover.payload["tool_calls"] == [
        {"tool_call_id": "call_1_0", "tool_name": "long_step", "recovery": "safe"}
    ]
    assert "its process was gone" in takeover.payload["message"]
    assert lease_agents.starts(log) == [trial.owner_pid, trial.taker_pid]
    store.close()


async def test_a_restarted_runtime_takes_over_its_dead_predecessors_run_at_once(
    tmp_path: Path, url: str
) -> None:
    log = tmp_path / "log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=lease_agents.agents)
    run = await client.submit("long", "work")
    await _killed_mid_tool(url, log, run.run_id)
    explained = str(nd.inspect.explain(store, run.run_id))
    assert "its process no longer exists on this host" in explained
    began = time.monotonic()
    runtime: Any = await DurableRuntime.open(
        store=store, agents=lease_agents.agents, lease_ms=DEFAULT_LEASE
    )
    try:
        await wait_for(lambda: run.record().fence == 2, 20, "the takeover")
        took = time.monotonic() - began
        result = await asyncio.wait_for(run.result(), 30)
    finally:
        await runtime.close()
    assert took <= 3.0, f"took over after {took:.2f} s"
    assert result.text == "done"
    view = nd.fold_events(await nd.read_events(store, run.run_id))
    assert view.takeover.startswith("Taken over from ") and "step 0 runs again" in view.takeover
    store.close()


async def test_a_live_owner_on_this_host_keeps_its_run(tmp_path: Path, url: str) -> None:
    """Only a provably dead process loses its lease early: a live one keeps it."""
    log = tmp_path / "log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=lease_agents.agents)
    run = await client.submit("long", "work")
    owner = worker(url, log, lease_ms=DEFAULT_LEASE, tool_seconds=3)
    try:
        await wait_for(lambda: owner.pid in lease_agents.starts(log), 60, "the owner's tool")
        async with await DurableRuntime.open(
            store=store, agents=lease_agents.agents, lease_ms=DEFAULT_LEASE
        ):
            await asyncio.sleep(1.5)  # two dead-owner scans: at the open and a second later
            assert run.record().fence == 1
            await asyncio.wait_for(run.wait("completed"), 30)
    finally:
        owner.send_signal(signal.SIGTERM)
        owner.communicate(timeout=30)
    assert run.record().fence == 1 and lease_agents.starts(log) == [owner.pid]
    store.close()
