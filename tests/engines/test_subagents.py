"""Every engine: sub-agents (``agent_tool``) answer, fail into an is_error result, and
suspend their parent on a gated call; a worker killed inside one is recovered."""

from __future__ import annotations

import asyncio

from support.executions import started, tool_counts, tool_rows

from nbdurable.loop._subagent import child_run_id

from .conftest import EngineCase

CHILD_STEPS = 2
"""The researcher's last checkpoint: its step index (every engine the same)."""
CHILD_EVENTS = {
    "approval_resolved",
    "checkpoint_saved",
    "model_attempt_started",
    "model_completed",
    "model_delta",
    "run_finished",
    "run_started",
    "run_suspended",
    "step_finish",
    "step_start",
    "tool_approval_request",
    "tool_call",
    "tool_call_delta",
    "tool_result",
}
"""The event types of the researcher's log (every engine the same): it streams, so its tool
calls' arguments are logged as they form."""


async def test_sub_agents_answer_fail_and_wait_for_approval(engine: EngineCase) -> None:
    """A tool-less sub-agent answers, one whose model fails hands its parent an
    is_error result, one with a gated tool suspends the parent (the approval carries
    its ``agent_path``) and finishes after the approval; each tool runs once."""
    engine.worker()
    store = engine.store
    async with engine.client() as rt:
        run = await rt.submit("delegator", "Tidy the warehouse with help.")
        waiting = await asyncio.wait_for(run.wait("waiting_approval"), 60)
        (request,) = await run.pending_approvals()
        await run.approve()
        result = await asyncio.wait_for(run.result(), 60)
    assert waiting.state == "waiting_approval"
    assert (request.tool_name, request.agent_path) == ("drop_table", ("researcher",))
    assert dict(request.input) == {"name": "tmp_research"}
    text = result.text
    assert "summarizer OK: Summary: three tables are stale." in text
    assert "oracle ERROR:" in text and "oracle down" in text
    assert "researcher OK: Research done: tmp_research dropped." in text
    checkpoint = store.load(run.run_id)
    researcher_call = next(
        r.tool_call_id
        for m in checkpoint.messages
        if m.role == "tool"
        for r in m.tool_results
        if r.tool_name == "researcher"
    )
    child = child_run_id(run.run_id, "researcher", researcher_call)
    child_checkpoint = store.load(child)
    assert child_checkpoint.messages[-1].text == "Research done: tmp_research dropped."
    assert child_checkpoint.step_index == CHILD_STEPS
    assert {e.type for e in store.read_events(child)} == CHILD_EVENTS
    # each tool of the sub-agent ran once, across the approval pause
    counts = tool_counts(engine.tools)
    assert len(counts) == 2 and set(counts.values()) == {1}, counts


async def test_sigkill_inside_a_sub_agent_then_a_second_worker_finishes(
    engine: EngineCase,
) -> None:
    tools = engine.tools
    first = engine.worker(slow=30)
    async with engine.client() as rt:
        run = await rt.submit("foreman", "Get the crew to do both steps.")
        await started(tools, "slow_step")
        first.kill()  # SIGKILL while the sub-agent's slow step runs
        engine.worker(slow=0.1)
        result = await asyncio.wait_for(run.result(), 60)
    assert result.text == "crew OK: Crew finished both steps."
    rows = tool_rows(tools)
    # the sub-agent's completed step never ran again; the interrupted one ran on the second
    # worker (the parent's "safe" policy for the sub-agent covers its tools)
    assert sorted(tool for tool, _ in rows) == ["slow_step", "slow_step", "step"]
    assert len({pid for _, pid in rows}) == 2
