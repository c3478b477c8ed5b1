"""Agents the Temporal tests hand to `nbdurable worker --engine temporal` subprocesses.

Every tool execution inserts one row into the SQLite side table named by
NBDURABLE_TEST_TOOLS (committed before the tool returns), so the tests count
executions across SIGKILLs and workers.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from typing import Any

import nbdurable as nd
from nbdurable.runtime import Agent


def _count(ctx: nd.ToolContext, name: str) -> None:
    path = os.environ.get("NBDURABLE_TEST_TOOLS")
    if not path:
        return
    db = sqlite3.connect(path, timeout=30)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS runs (run_id, call_id, tool, pid)")
        db.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?)",
            (ctx.run_id, ctx.tool_call_id, name, os.getpid()),
        )
        db.commit()
    finally:
        db.close()


@nd.tool
async def step(n: int, ctx: nd.ToolContext) -> str:
    """Do step n (safe to re-run)."""
    _count(ctx, "step")
    return f"step {n} done"


@nd.tool
async def slow_step(n: int, ctx: nd.ToolContext) -> str:
    """Do a slow step n (safe to re-run)."""
    _count(ctx, "slow_step")
    await asyncio.sleep(float(os.environ.get("NBDURABLE_TEST_SLOW", "3")))
    return f"slow step {n} done"


@nd.tool(needs_approval=True)
def drop_table(name: str, ctx: nd.ToolContext) -> str:
    """Drop a warehouse table."""
    _count(ctx, "drop_table")
    return f"dropped {name}"


@nd.tool(needs_approval=True, allow_edit=True)
def edit_table(name: str, ctx: nd.ToolContext) -> str:
    """Drop a warehouse table (a human may edit which one before approving)."""
    _count(ctx, "edit_table")
    return f"dropped {name}"


def _read_result(request: Any) -> nd.Turn:
    """The model's answer: the call's result, as it read it."""
    return nd.Turn(text=f"read: {request.messages[-1].tool_results[0].result}")


@nd.tool
async def slow_manual(n: int, ctx: nd.ToolContext) -> str:
    """Do a slow manual step n (not safe to re-run on its own)."""
    _count(ctx, "slow_manual")
    await asyncio.sleep(float(os.environ.get("NBDURABLE_TEST_SLOW", "3")))
    return f"manual step {n} done"


def _recovery(*names: str) -> dict[str, str]:
    policies = {
        "step": "safe",
        "slow_step": "safe",
        "drop_table": "idempotent",
        "edit_table": "idempotent",
        "slow_manual": "manual",
    }
    return {name: policies[name] for name in names}


def _approval_model() -> nd.ScriptedModel:
    return nd.ScriptedModel(
        [
            nd.Turn.call("step", n=1),
            nd.Turn.call("drop_table", name="stg_2023"),
            nd.Turn.call("step", n=2),
            "Done: dropped stg_2023.",
        ]
    )


def _crash_model() -> nd.ScriptedModel:
    return nd.ScriptedModel(
        [
            nd.Turn.call("step", n=1),
            nd.Turn.call("slow_step", n=2),
            nd.Turn.call("step", n=3),
            "All three steps done.",
        ]
    )


def _many_model() -> nd.ScriptedModel:
    return nd.ScriptedModel([nd.Turn.call("step", n=1), nd.Turn.call("step", n=2), "ok"])


def _flaky_model() -> nd.ScriptedModel:
    """Fails its first call, then answers."""
    return nd.ScriptedModel(["Answered on a later attempt."], fail_on={1: RuntimeError("503")})


def _manual_model() -> nd.ScriptedModel:
    return nd.ScriptedModel([nd.Turn.call("slow_manual", n=1), "Manual step settled."])


def _results(request: nd.ModelRequest) -> str:
    """The parent's last turn: every tool result it saw, flagged OK or ERROR."""
    seen = [
        f"{r.tool_name} {'ERROR' if r.is_error else 'OK'}: {r.result}"
        for message in request.messages
        if message.role == "tool"
        for r in message.tool_results
    ]
    return "; ".join(seen)


def _sub_agents() -> list[nd.Tool]:
    """A tool-less summarizer, a failing oracle and a researcher with a gated tool."""
    summarizer = nd.agent_tool(
        "summarizer", model=nd.ScriptedModel(["Summary: three tables are stale."])
    )
    oracle = nd.agent_tool(
        "oracle",
        model=nd.ScriptedModel(["never"], fail_on={1: RuntimeError("oracle down")}),
    )
    researcher = nd.agent_tool(
        "researcher",
        model=nd.ScriptedModel(
            [
                nd.Turn.call("step", n=7),
                nd.Turn.call("drop_table", name="tmp_research"),
                "Research done: tmp_research dropped.",
            ]
        ),
        tools=[step, drop_table],
    )
    return [summarizer, oracle, researcher]


def _delegator_model() -> nd.ScriptedModel:
    return nd.ScriptedModel(
        [
            nd.Turn.call("summarizer", prompt="Summarize the warehouse."),
            nd.Turn.call("oracle", prompt="Predict tomorrow's load."),
            nd.Turn.call("researcher", prompt="Find and drop the temporary table."),
            _results,
        ]
    )


def _crew() -> nd.Tool:
    """A sub-agent with a quick step and a slow one (a worker is killed during it)."""
    model = nd.ScriptedModel(
        [nd.Turn.call("step", n=1), nd.Turn.call("slow_step", n=2), "Crew finished both steps."]
    )
    return nd.agent_tool("crew", model=model, tools=[step, slow_step])


def _busy_model() -> nd.ScriptedModel:
    return nd.ScriptedModel([*(nd.Turn.call("step", n=i) for i in range(1, 9)), "finished"])


def _big_model() -> nd.ScriptedModel:
    """Answers with a text far over a small max_payload_bytes."""
    return nd.ScriptedModel(["x" * 5000])


def _warden_model() -> nd.ScriptedModel:
    """One gated call (the run waits), then two more in one step (a grant covers them)."""
    return nd.ScriptedModel(
        [
            nd.Turn.call("drop_table", name="stg_1"),
            nd.Turn(
                tool_calls=[("drop_table", {"name": "stg_2"}), ("drop_table", {"name": "stg_3"})]
            ),
            "Dropped three staging tables.",
        ]
    )


agents = [
    Agent(
        "janitor",
        model=_approval_model(),
        tools=[step, drop_table],
        version="1",
        tool_recovery=_recovery("step", "drop_table"),
        stream=True,
    ),
    Agent(
        "crashy",
        model=_crash_model(),
        tools=[step, slow_step],
        version="1",
        tool_recovery=_recovery("step", "slow_step"),
    ),
    Agent("many", model=_many_model(), tools=[step], version="1", tool_recovery=_recovery("step")),
    Agent(
        "flaky",
        model=_flaky_model(),
        version="1",
        model_retry={"max_attempts": 3, "initial_delay_ms": 1500, "max_delay_ms": 1500},
    ),
    Agent("fragile", model=_flaky_model(), version="1"),
    Agent(
        "careful",
        model=_manual_model(),
        tools=[slow_manual],
        version="1",
        tool_recovery=_recovery("slow_manual"),
    ),
    Agent(
        "delegator",
        model=_delegator_model(),
        tools=_sub_agents(),
        version="1",
        tool_recovery={"summarizer": "safe", "oracle": "safe", "researcher": "safe"},
    ),
    Agent(
        "foreman",
        model=nd.ScriptedModel([nd.Turn.call("crew", prompt="Do both steps."), _results]),
        tools=[_crew()],
        version="1",
        tool_recovery={"crew": "safe"},
    ),
    Agent("busy", model=_busy_model(), tools=[step], version="1", tool_recovery=_recovery("step")),
    Agent("verbose", model=_big_model(), version="1"),
    Agent(
        "editor",
        model=nd.ScriptedModel([nd.Turn.call("edit_table", name="stg"), _read_result]),
        tools=[edit_table],
        version="1",
        tool_recovery=_recovery("edit_table"),
    ),
    Agent(
        "warden",
        model=_warden_model(),
        tools=[drop_table],
        version="1",
        tool_recovery=_recovery("drop_table"),
    ),
]
