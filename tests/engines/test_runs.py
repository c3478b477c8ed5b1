"""Every engine: a submitted run executes its steps once; approvals park and resume it;
model errors are retried as the agent says; cancel ends it; two workers share the work."""

from __future__ import annotations

import asyncio

import pytest
from support.executions import started, tool_counts, tool_rows

import nbdurable as nd

from .conftest import EngineCase


async def test_multi_step_run_with_approval(engine: EngineCase) -> None:
    engine.worker()
    store = engine.store
    async with engine.client() as rt:
        run = await rt.submit("janitor", "Clean up stale staging tables.")
        assert run.record().engine == engine.name
        record = await asyncio.wait_for(run.wait("waiting_approval"), 30)
        assert record.state == "waiting_approval"
        (request,) = await run.pending_approvals()
        assert request.tool_name == "drop_table"
        await run.approve()
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Done: dropped stg_2023."
    counts = tool_counts(engine.tools)
    assert len(counts) == 3 and set(counts.values()) == {1}
    events = [e.type for e in store.read_events(run.run_id)]
    assert "checkpoint_saved" in events and "model_delta" in events
    offsets = [e.offset for e in store.read_events(run.run_id)]
    assert offsets == list(range(1, len(offsets) + 1))


async def test_a_denied_call_is_an_error_result_and_the_run_goes_on(engine: EngineCase) -> None:
    engine.worker()
    async with engine.client() as rt:
        run = await rt.submit("janitor", "Clean up stale staging tables.")
        await asyncio.wait_for(run.wait("waiting_approval"), 30)
        await run.deny(reason="Not this table.")
        result = await asyncio.wait_for(run.result(), 30)
    denied = [
        part
        for message in result.messages
        for part in message.content
        if isinstance(part, nd.ToolResultPart) and part.tool_name == "drop_table"
    ]
    assert len(denied) == 1 and denied[0].is_error and denied[0].result == "Not this table."
    assert [tool for tool, _ in tool_rows(engine.tools)] == ["step", "step"]


async def test_model_retry_waits_then_completes(engine: EngineCase) -> None:
    engine.worker()
    store = engine.store
    async with engine.client() as rt:
        run = await rt.submit("flaky", "Answer, eventually.")
        waiting = await asyncio.wait_for(run.wait("retry_wait"), 30)
        assert waiting.model_attempts == 1 and waiting.next_attempt_at is not None
        assert waiting.error is not None and "503" in waiting.error
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Answered on a later attempt."
    events = [e.type for e in store.read_events(run.run_id)]
    assert events.count("model_attempt_failed") == 1
    assert events.count("model_completed") == 1


async def test_model_error_without_retry_fails_the_run(engine: EngineCase) -> None:
    engine.worker()
    async with engine.client() as rt:
        run = await rt.submit("fragile", "Answer once.")
        record = await asyncio.wait_for(run.wait(), 30)
    assert record.state == "failed" and record.reason == "model_error"
    assert record.error is not None and "503" in record.error


async def test_cancel_mid_tool_ends_cancelled(engine: EngineCase) -> None:
    engine.worker(slow=30)
    async with engine.client() as rt:
        run = await rt.submit("crashy", "Do the three steps.")
        await started(engine.tools, "slow_step")
        await run.cancel()
        record = await asyncio.wait_for(run.wait(), 30)
        assert record.state == "cancelled"
        with pytest.raises(nd.RunFailedError):
            await run.result()
        await engine.assert_execution_cancelled(rt, run.run_id)
    assert [tool for tool, _ in tool_rows(engine.tools)] == ["step", "slow_step"]


async def test_two_workers_many_runs_no_step_twice(engine: EngineCase) -> None:
    """Two workers share 24 runs submitted at once: each step runs exactly once."""
    engine.cannot(
        "restate",
        "Restate sends a service's new invocations to its latest deployment (measured: "
        "100 of 100 tool calls on the worker registered last) over one HTTP/2 connection "
        "per deployment; endpoints share work as replicas behind an HTTP/2 load balancer, "
        "which two separately registered workers are not (docs/restate.md, Scaling out)",
    )
    # An embedded worker claims every free slot in one go (100 by default): at 6
    # each, neither can take all 24 runs and both race for the rest.
    args = ("--max-concurrent-runs", "6") if engine.name == "embedded" else ()
    engine.worker(args=args)
    engine.worker(args=args)
    async with engine.client() as rt:
        # 24 runs keep both workers racing for claims, in half the time 50 took on Temporal
        runs = [await rt.submit("many", f"Run {i}.") for i in range(24)]
        results = await asyncio.wait_for(asyncio.gather(*(r.result() for r in runs)), 120)
    assert {r.text for r in results} == {"ok"}
    counts = tool_counts(engine.tools)
    assert len(counts) == 48 and set(counts.values()) == {1}
    assert len({pid for _, pid in tool_rows(engine.tools)}) == 2  # both workers took work
