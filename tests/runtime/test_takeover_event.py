"""What a takeover leaves behind, on every store: the ``run_taken_over`` event, the
``needs_attention`` reason of an interrupted manual call, ``explain`` and the folded view.

Another worker's claim is written through the store (as a worker process would),
its tool call left ``started``; then this process's runtime takes the run over.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.notebook.widgets._run_state import Cards, Clock, run_state
from nbdurable.runs import RunPatch, ToolIntent, this_process
from nbdurable.runtime import Agent, DurableRuntime

LEASE = 30_000


def _dead_holder() -> str:
    """The lease holder name of a process that existed on this host and is gone now."""
    child = subprocess.Popen(["sleep", "30"])
    text = Path(f"/proc/{child.pid}/stat").read_text()
    start = text[text.rfind(")") + 2 :].split()[19]
    child.send_signal(signal.SIGKILL)
    child.wait()
    me = this_process()
    assert me is not None
    return f"worker-dead@{me.host}:{child.pid}#{me.boot_id}/{me.pid_ns}/{start}"


def _agent(calls: list[str]) -> Agent:
    @nd.tool
    def charge(amount: int) -> str:
        """Charge a card."""
        calls.append("charge")
        return f"charged {amount}"

    return Agent(
        "charger",
        nd.ScriptedModel([nd.Turn.call("charge", amount=3), "charged"]),
        [charge],
        version="1",
        tool_recovery={"charge": "manual"},
    )


async def _interrupted_by(store: Any, client: DurableRuntime, holder: str, *, expired: bool) -> str:
    """A run whose owner ``holder`` started the tool call and then stopped renewing."""
    run = await client.submit("charger", "charge")
    record = store.rt_claim(holder, client.now(), LEASE, client.registry.keys())
    assert record is not None
    if expired:  # set, not claimed in the past: PostgreSQL dates leases by its own clock
        record = store.rt_update(
            run.run_id, RunPatch(lease_expires_at=client.now() - LEASE), fence=record.fence
        )
    intent = ToolIntent(
        run_id=run.run_id,
        tool_call_id="call_1_0",
        tool_name="charge",
        step_index=0,
        state="started",
    )
    store.rt_intent(intent, fence=record.fence)
    return run.run_id


@pytest.mark.skipif(this_process() is None, reason="needs Linux /proc")
async def test_a_dead_owners_run_is_taken_over_at_once_and_says_so(store: Any) -> None:
    calls: list[str] = []
    agent = _agent(calls)
    client = DurableRuntime(store=store, agents=[agent])
    run_id = await _interrupted_by(store, client, _dead_holder(), expired=False)
    explained = str(nd.inspect.explain(store, run_id))
    assert "its process no longer exists on this host" in explained
    async with await DurableRuntime.open(store=store, agents=[agent], lease_ms=LEASE) as runtime:
        run = await runtime.get_run(run_id)
        await asyncio.wait_for(run.wait("needs_attention"), 10)  # long before the 30 s lease
    record = store.rt_get(run_id)
    assert "may have run twice" not in (record.reason or "")  # its process is gone
    events = await nd.read_events(store, run_id)
    [takeover] = [e for e in events if e.type == "run_taken_over"]
    assert takeover.payload["cause"] == "owner_gone"
    assert takeover.payload["tool_calls"] == [
        {"tool_call_id": "call_1_0", "tool_name": "charge", "recovery": "manual"}
    ]
    assert takeover.payload["message"].startswith("Taken over from worker-dead (pid ")
    assert "its process was gone; step 0 runs again" in takeover.payload["message"]
    assert "Taken over from worker-dead" in str(nd.inspect.explain(store, run_id))
    assert calls == []


async def test_a_lapsed_owner_may_still_run_the_call_and_the_human_is_told(store: Any) -> None:
    calls: list[str] = []
    agent = _agent(calls)
    client = DurableRuntime(store=store, agents=[agent])
    run_id = await _interrupted_by(store, client, "worker-elsewhere", expired=True)
    async with await DurableRuntime.open(store=store, agents=[agent], lease_ms=LEASE) as runtime:
        run = await runtime.get_run(run_id)
        await asyncio.wait_for(run.wait("needs_attention"), 10)
        holder = store.rt_get(run_id).lease_owner
        assert holder is None  # needs_attention releases the lease
    record = store.rt_get(run_id)
    assert record.previous_owner == "worker-elsewhere"
    assert "its previous owner worker-elsewhere lost its lease mid-call" in record.reason
    assert "may have run twice" in record.reason
    explained = str(nd.inspect.explain(store, run_id))
    assert "may have run twice" in explained
    assert "Taken over from worker-elsewhere: its lease lapsed" in explained
    events = await nd.read_events(store, run_id)
    [takeover] = [e for e in events if e.type == "run_taken_over"]
    assert takeover.payload["cause"] == "lease_lapsed"
    assert takeover.payload["previous_owner"] == "worker-elsewhere"
    view = nd.fold_events(events)
    assert view.status == "needs_attention" and view.takeover == takeover.payload["message"]
    assert "may have run twice" in (view.error or "")
    state = run_state(view, Cards(), Clock())
    assert state["takeover"] == takeover.payload["message"]

    # a human retries: the next claim is no takeover and the view's line goes
    async with await DurableRuntime.open(store=store, agents=[agent], lease_ms=LEASE) as runtime:
        run = await runtime.get_run(run_id)
        await run.retry()
        await asyncio.wait_for(run.wait("completed"), 10)
    assert calls == ["charge"]
    record = store.rt_get(run_id)
    assert record.previous_owner is None
    events = await nd.read_events(store, run_id)
    assert len([e for e in events if e.type == "run_taken_over"]) == 1
    assert nd.fold_events(events).takeover == ""
    assert "Taken over" not in str(nd.inspect.explain(store, run_id))


async def test_a_released_run_is_claimed_without_a_takeover_event(store: Any) -> None:
    calls: list[str] = []
    agent = _agent(calls)
    async with await DurableRuntime.open(store=store, agents=[agent], lease_ms=LEASE) as runtime:
        run = await runtime.submit("charger", "charge")
        await asyncio.wait_for(run.wait("completed"), 10)
    events = await nd.read_events(store, run.run_id)
    assert not [e for e in events if e.type == "run_taken_over"]
    assert store.rt_get(run.run_id).previous_owner is None
    assert calls == ["charge"]
