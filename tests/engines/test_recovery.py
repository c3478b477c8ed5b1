"""Every engine: a worker SIGKILLed mid-tool, and the tool's recovery policy decides.

``safe`` (and ``idempotent``) calls run again on the next worker, completed ones
never; a ``manual`` call leaves the run in ``needs_attention`` for a human, who
retries it (it runs once more) or denies it (it never runs again).
"""

from __future__ import annotations

import asyncio

from support.executions import started, tool_counts, tool_rows

import nbdurable as nd
from nbdurable.runtime import DurableRuntime, Run

from .conftest import EngineCase


async def test_sigkill_mid_run_then_a_second_worker_finishes(engine: EngineCase) -> None:
    tools = engine.tools
    first = engine.worker(slow=30)
    async with engine.client() as rt:
        run = await rt.submit("crashy", "Do the three steps.")
        await started(tools, "slow_step")
        first.kill()  # SIGKILL while the slow step runs
        engine.worker(slow=0.1)
        result = await asyncio.wait_for(run.result(), 60)
        assert result.text == "All three steps done."
    rows = tool_rows(tools)
    by_tool: dict[str, int] = {}
    for tool, _ in rows:
        by_tool[tool] = by_tool.get(tool, 0) + 1
    # completed steps never ran again; only the interrupted (safe) step ran twice
    assert by_tool == {"step": 2, "slow_step": 2}
    counts = tool_counts(tools)
    assert sorted(counts.values()) == [1, 1, 2]
    assert len({pid for _, pid in rows}) == 2


async def _interrupted(engine: EngineCase, rt: DurableRuntime) -> Run:
    """Submit the manual agent, SIGKILL its worker mid-tool; the run in needs_attention."""
    tools = engine.tools
    first = engine.worker(slow=30)
    run = await rt.submit("careful", "Do the manual step.")
    await started(tools)
    first.kill()
    engine.worker(slow=0.1)
    record = await asyncio.wait_for(run.wait("needs_attention", "completed", "failed"), 60)
    assert record.state == "needs_attention", record
    assert record.reason is not None and "slow_manual" in record.reason
    assert len(tool_rows(tools)) == 1  # a manual tool is not re-run on its own
    return run


async def test_manual_tool_interrupted_then_retry_runs_it_once(engine: EngineCase) -> None:
    async with engine.client() as rt:
        run = await _interrupted(engine, rt)
        await run.retry()
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Manual step settled."
    assert [tool for tool, _ in tool_rows(engine.tools)] == ["slow_manual", "slow_manual"]
    assert run.record().rerun_tool_calls == []


async def test_manual_tool_interrupted_then_deny_settles_it(engine: EngineCase) -> None:
    async with engine.client() as rt:
        run = await _interrupted(engine, rt)
        await run.deny(reason="An operator checked: not done, do not redo.")
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Manual step settled."
        denied = [
            part
            for message in result.messages
            for part in message.content
            if isinstance(part, nd.ToolResultPart)
        ]
        assert len(denied) == 1 and denied[0].is_error
        assert denied[0].result == "An operator checked: not done, do not redo."
    assert len(tool_rows(engine.tools)) == 1  # deny never re-runs the tool
