"""ctx.ensure_owner() and the runtime's own ownership checks, in one process on every store.

Another owner takes a run over through the store's own claim (as a second worker
would once the lease lapsed) while this runtime's tool or model call is in
flight; what the stale owner may still do is then checked.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.runs import RunPatch
from nbdurable.runtime import Agent, DurableRuntime

from .conftest import GatedModel, eventually

LONG_LEASE = 60_000  # the keeper never notices the takeover first: ensure_owner must
SLOW_POLL = 5.0  # (renewal period: min(lease / 3, 4 x poll) = 20 s)


def take_over(store: Any, runtime: DurableRuntime, run_id: str) -> Any:
    """Claim the run as another worker would once its lease lapsed."""
    # the lease lapses (PostgreSQL judges leases by its own clock, so a later
    # ``now`` passed to the claim would not do)
    store.rt_update(run_id, RunPatch(lease_expires_at=runtime.now() - 1))
    claimed = store.rt_claim("other-worker", runtime.now(), LONG_LEASE, runtime.registry.keys())
    assert claimed is not None and claimed.run_id == run_id
    return claimed


async def test_ensure_owner_raises_once_another_worker_took_the_run_and_nothing_is_recorded(
    store: Any,
) -> None:
    reached = asyncio.Event()
    go = asyncio.Event()
    effects: list[str] = []

    @nd.tool
    async def pay(amount: int, ctx: nd.ToolContext) -> str:
        """Pay."""
        ctx.ensure_owner()  # still ours: returns
        reached.set()
        await go.wait()
        ctx.ensure_owner()  # taken over meanwhile: raises, so no payment
        effects.append(ctx.idempotency_key)
        return "paid"

    agent = Agent(
        "payer",
        nd.ScriptedModel([nd.Turn.call("pay", amount=5), "paid"]),
        [pay],
        version="1",
        tool_recovery={"pay": "manual"},
    )
    runtime = await DurableRuntime.open(
        store=store, agents=[agent], lease_ms=LONG_LEASE, poll_interval=SLOW_POLL
    )
    try:
        run = await runtime.submit("payer", "pay")
        await asyncio.wait_for(reached.wait(), 10)
        claimed = take_over(store, runtime, run.run_id)
        assert claimed.previous_owner is not None and claimed.previous_owner.startswith(
            runtime.owner_id
        )
        go.set()
        engine: Any = runtime.engine
        await eventually(lambda: not engine._executions)  # the stale execution stopped
    finally:
        await runtime.close()
    assert effects == []
    record = store.rt_get(run.run_id)
    # the stale owner wrote nothing more: not its tool result, not an end state
    assert record.fence == 2 and record.lease_owner == "other-worker"
    assert record.state == "running"
    [intent] = store.rt_intents(run.run_id)
    assert intent.state == "started" and intent.result is None
    events = await nd.read_events(store, run.run_id)
    assert not [e for e in events if e.type in ("tool_result", "run_error", "run_finished")]
    assert store.load(run.run_id) is None  # no checkpoint of the step either


async def test_ensure_owner_works_from_a_worker_thread(store: Any) -> None:
    reached = threading.Event()
    go = threading.Event()
    outcomes: list[str] = []

    def blocking_pay(ctx: nd.ToolContext) -> str:
        ctx.ensure_owner()
        reached.set()
        go.wait(10)
        try:
            ctx.ensure_owner()
        except nd.LeaseLostError as exc:
            outcomes.append(f"lost {exc.run_id}")
            raise
        outcomes.append("paid")
        return "paid"

    @nd.tool
    async def pay(ctx: nd.ToolContext) -> str:
        """Pay through a blocking client."""
        return await asyncio.to_thread(blocking_pay, ctx)

    agent = Agent(
        "payer",
        nd.ScriptedModel([nd.Turn.call("pay"), "paid"]),
        [pay],
        version="1",
        tool_recovery={"pay": "manual"},
    )
    runtime = await DurableRuntime.open(
        store=store, agents=[agent], lease_ms=LONG_LEASE, poll_interval=SLOW_POLL
    )
    try:
        run = await runtime.submit("payer", "pay")
        await eventually(reached.is_set)
        take_over(store, runtime, run.run_id)
        go.set()
        engine: Any = runtime.engine
        await eventually(lambda: not engine._executions)
    finally:
        await runtime.close()
    assert outcomes == [f"lost {run.run_id}"]
    [intent] = store.rt_intents(run.run_id)
    assert intent.state == "started"


async def test_a_tool_does_not_start_when_the_run_was_taken_over_during_the_model_call(
    store: Any,
) -> None:
    started: list[str] = []

    @nd.tool
    def pay(ctx: nd.ToolContext) -> str:
        """Pay (a sync tool: it runs on the loop thread)."""
        started.append(ctx.tool_call_id)
        return "paid"

    gate = asyncio.Event()
    model = GatedModel([nd.Turn.call("pay"), "paid"], gate=gate)
    agent = Agent("payer", model, [pay], version="1", tool_recovery={"pay": "safe"})
    runtime = await DurableRuntime.open(
        store=store, agents=[agent], lease_ms=LONG_LEASE, poll_interval=SLOW_POLL
    )
    try:
        run = await runtime.submit("payer", "pay")
        await eventually(lambda: model.entered == 1)
        take_over(store, runtime, run.run_id)
        gate.set()
        engine: Any = runtime.engine
        await eventually(lambda: not engine._executions)
    finally:
        await runtime.close()
    assert started == []
    assert store.rt_get(run.run_id).lease_owner == "other-worker"


async def test_a_tool_starts_with_half_its_lease_ahead_even_after_a_blocking_tool(
    store: Any,
) -> None:
    lease = 2_000
    margins: list[int] = []
    pushed: list[int] = []

    @nd.tool
    def block() -> str:
        """Block the event loop (a sync client): the lease keeper cannot renew meanwhile."""
        time.sleep(1.4)
        return "blocked"

    @nd.tool
    async def pay(ctx: nd.ToolContext) -> str:
        """Pay."""
        before = store.rt_get(ctx.run_id).lease_expires_at
        margins.append(before - runtime.now())  # the lease ahead as the tool starts
        await asyncio.sleep(0.05)
        ctx.ensure_owner()
        pushed.append(store.rt_get(ctx.run_id).lease_expires_at - before)
        return "paid"

    model = nd.ScriptedModel([nd.Turn(tool_calls=[("block", {}), ("pay", {})]), "paid"])
    agent = Agent(
        "payer",
        model,
        [block, pay],
        version="1",
        tool_recovery={"pay": "manual", "block": "safe"},
        max_tool_concurrency=1,
    )
    async with await DurableRuntime.open(
        store=store, agents=[agent], lease_ms=lease, poll_interval=SLOW_POLL
    ) as runtime:
        run = await runtime.submit("payer", "pay")
        result = await asyncio.wait_for(run.result(), 20)
    assert result.text == "paid"
    assert margins[0] >= lease // 2 - 100  # renewed before the start (1.4 s were used up)
    assert pushed[0] > 0  # ensure_owner pushed the lease forward


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_ensure_owner_outside_a_runtime_returns_at_once(kind: str) -> None:
    calls: list[str] = []

    def sync_probe(ctx: nd.ToolContext) -> str:
        ctx.ensure_owner()
        calls.append("sync")
        return "ok"

    async def async_probe(ctx: nd.ToolContext) -> str:
        ctx.ensure_owner()
        calls.append("async")
        return "ok"

    probe = nd.tool(sync_probe if kind == "sync" else async_probe, name="probe")
    store = nd.open_store("memory://")
    result = await nd.generate_text(
        model=nd.ScriptedModel([nd.Turn.call("probe"), "done"]),
        messages="probe",
        tools=[probe],
        session=nd.DurableSession(store, run_id="plain"),
    )
    assert result.text == "done" and calls == [kind]
    assert nd.ToolContext(tool_call_id="c", tool_name="probe").ensure_owner() is None
