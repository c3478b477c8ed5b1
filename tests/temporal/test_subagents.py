"""Sub-agents (``agent_tool``) on Temporal read exactly like on the embedded engine.

The same ``delegator`` agent runs once in-process on the embedded engine and once
on a Temporal worker: a tool-less sub-agent answers, a sub-agent whose model
fails hands its parent an is_error result, a sub-agent with a gated tool
suspends the parent (the approval carries its ``agent_path``) and finishes after
the approval. Both runs must leave the same states, results, child checkpoints
and tool executions.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support import temporal_agents
from support.executions import started, tool_counts, tool_rows

import nbdurable as nd
from nbdurable.loop.subagent import child_run_id
from nbdurable.runtime import DurableRuntime

from .conftest import Cluster


async def _delegate(rt: DurableRuntime, store: Any) -> dict[str, Any]:
    """Run the delegator through its approval; what a user can observe of it."""
    run = await rt.submit("delegator", "Tidy the warehouse with help.")
    waiting = await asyncio.wait_for(run.wait("waiting_approval"), 60)
    (request,) = await run.pending_approvals()
    await run.approve()
    result = await asyncio.wait_for(run.result(), 60)
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
    return {
        "run_id": run.run_id,
        "waiting": waiting.state,
        "request": (request.tool_name, request.agent_path, dict(request.input)),
        "text": result.text,
        "child_text": child_checkpoint.messages[-1].text,
        "child_steps": child_checkpoint.step_index,
        "child_events": {e.type for e in store.read_events(child)},
        "parent_events": [e.type for e in store.read_events(run.run_id)],
    }


async def test_sub_agents_match_the_embedded_engine(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedded_tools = tmp_path / "embedded-tools.db"
    monkeypatch.setenv("NBDURABLE_TEST_TOOLS", str(embedded_tools))
    store = nd.open_store(f"sqlite:///{tmp_path / 'embedded.db'}")
    async with DurableRuntime(store=store, agents=temporal_agents.agents) as rt:
        embedded = await _delegate(rt, store)

    cluster.worker()
    async with cluster.runtime(heartbeat_timeout=2) as rt:
        on_temporal = await _delegate(rt, cluster.store)

    assert on_temporal["waiting"] == embedded["waiting"] == "waiting_approval"
    assert on_temporal["request"] == embedded["request"]
    assert embedded["request"][:2] == ("drop_table", ("researcher",))
    assert on_temporal["text"] == embedded["text"]
    text = on_temporal["text"]
    assert "summarizer OK: Summary: three tables are stale." in text
    assert "oracle ERROR:" in text and "oracle down" in text
    assert "researcher OK: Research done: tmp_research dropped." in text
    assert on_temporal["child_text"] == embedded["child_text"]
    assert on_temporal["child_steps"] == embedded["child_steps"]
    assert {"checkpoint_saved", "model_completed"} <= on_temporal["child_events"]
    assert on_temporal["child_events"] == embedded["child_events"]
    # each tool of the sub-agent ran once, on both engines, across the approval pause
    for path in (embedded_tools, cluster.tools):
        counts = tool_counts(path)
        assert len(counts) == 2 and set(counts.values()) == {1}, counts


async def test_sigkill_inside_a_sub_agent_then_a_second_worker_finishes(cluster: Cluster) -> None:
    tools = cluster.tools
    first = cluster.worker(slow=30)
    async with cluster.runtime(heartbeat_timeout=1.5) as rt:
        run = await rt.submit("foreman", "Get the crew to do both steps.")
        await started(tools, "slow_step")
        first.kill()  # SIGKILL while the sub-agent's slow step runs
        cluster.worker(slow=0.1)
        result = await asyncio.wait_for(run.result(), 60)
    assert result.text == "crew OK: Crew finished both steps."
    rows = tool_rows(tools)
    # the sub-agent's completed step never ran again; the interrupted one ran on the second
    # worker (the parent's "safe" policy for the sub-agent covers its tools)
    assert sorted(tool for tool, _ in rows) == ["slow_step", "slow_step", "step"]
    assert len({pid for _, pid in rows}) == 2
