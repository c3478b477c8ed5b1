"""A stale owner's tool outcomes become late results, in one process on every store.

Another owner takes the run over through the store's own claim while this
runtime's tool runs (as a second worker would once the lease lapsed); the tool
then finishes, or is stopped by the lease keeper. What the stale owner had not
recorded is kept as a late result: never as the call's result, never lost. A
result already recorded (its step's checkpoint) is not a late one, and a tool
whose ``ctx.ensure_owner()`` refused it did not act: nothing is kept for it.
(tests/runtime/test_late_results.py does this with real processes and signals.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime

from .conftest import eventually
from .test_ensure_owner import LONG_LEASE, SLOW_POLL, take_over


def _agent(tool: nd.Tool, calls: int = 1) -> Agent:
    turns: list[Any] = [nd.Turn.call(tool.name, amount=i) for i in range(calls)]
    return Agent(
        "payer",
        nd.ScriptedModel([*turns, "paid"]),
        [tool],
        version="1",
        tool_recovery={tool.name: "manual"},
    )


async def _taken_over_mid_call(
    store: Any, agent: Agent, reached: asyncio.Event, go: asyncio.Event, **options: Any
) -> Any:
    """Run ``agent``; take its run over once its tool reached ``reached``; let the tool go on."""
    options = {"lease_ms": LONG_LEASE, "poll_interval": SLOW_POLL, **options}
    runtime = await DurableRuntime.open(store=store, agents=[agent], **options)
    try:
        run = await runtime.submit("payer", "pay")
        await asyncio.wait_for(reached.wait(), 10)
        take_over(store, runtime, run.run_id)
        go.set()
        engine: Any = runtime.engine
        await eventually(lambda: not engine._executions)  # the stale execution stopped
    finally:
        await runtime.close()
    return store.rt_get(run.run_id)


async def test_a_result_the_stale_owner_could_not_record_is_kept_late(store: Any) -> None:
    reached, go = asyncio.Event(), asyncio.Event()
    calls = 0

    @nd.tool
    async def pay(amount: int, ctx: nd.ToolContext) -> str:
        """Pay (does not check its lease)."""
        nonlocal calls
        calls += 1
        if calls == 2:  # the second call: taken over while it runs
            reached.set()
            await go.wait()
        return f"paid {amount}"

    record = await _taken_over_mid_call(store, _agent(pay, calls=2), reached, go)
    assert record.fence == 2 and record.lease_owner == "other-worker"
    assert record.state == "running"  # the stale owner changed nothing but its note
    # only the second call: the first one's result is in its step's checkpoint
    [late] = record.late_results
    assert (late.step_index, late.fence) == (1, 1)
    assert late.outcome == "result" and late.result is not None
    assert late.result["result"] == "paid 1" and late.owner is not None
    intents = {i.tool_call_id: i.state for i in store.rt_intents(record.run_id)}
    first = next(call for call in intents if call != late.tool_call_id)
    assert intents == {first: "completed", late.tool_call_id: "started"}
    events = await nd.read_events(store, record.run_id)
    [event] = [e for e in events if e.type == nd.events.TOOL_LATE_RESULT]
    assert event.payload == late.model_dump(mode="json")
    view = nd.fold_events(events)
    assert view.late_results and "already ran once" in view.late_results[0]


async def test_a_call_the_lease_keeper_stopped_is_kept_as_cut_off(store: Any) -> None:
    reached, go = asyncio.Event(), asyncio.Event()
    stopped = asyncio.Event()

    @nd.tool
    async def pay(amount: int, ctx: nd.ToolContext) -> str:
        """Pay after a long wait (the keeper stops it first)."""
        reached.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stopped.set()
            raise
        return "paid"

    # the keeper renews every 4 x poll: it finds the run lost while the tool waits
    record = await _taken_over_mid_call(
        store, _agent(pay), reached, go, lease_ms=3_000, poll_interval=0.02
    )
    assert stopped.is_set()
    [late] = record.late_results
    assert late.outcome == "cut_off" and late.result is None and late.fence == 1
    explained = str(nd.inspect.explain(store, record.run_id))
    assert "was still running" in explained and "unknown" in explained


async def test_a_tool_that_ensure_owner_stopped_leaves_no_late_result(store: Any) -> None:
    reached, go = asyncio.Event(), asyncio.Event()

    @nd.tool
    async def pay(amount: int, ctx: nd.ToolContext) -> str:
        """Pay (checks its lease before acting)."""
        reached.set()
        await go.wait()
        ctx.ensure_owner()  # taken over meanwhile: raises, so no payment
        return "paid"

    record = await _taken_over_mid_call(store, _agent(pay), reached, go)
    assert record.fence == 2 and record.late_results == []
