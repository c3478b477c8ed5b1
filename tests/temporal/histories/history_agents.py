"""The agents and tasks the recorded workflow histories ran under, frozen.

A recorded history replays only against the definitions it was recorded with
(each run carries its agent's fingerprint, and the workflow checks it on
replay), so this module is a copy of the Temporal test agents it was recorded
from, not an import of them: a change to the test agents never looks like a
change of the workflow. Its module name (``history_agents``, imported top-level
by the recording worker and by the replay test) is part of the fingerprints too:
module-level functions count by their importable name. Edit it only together
with a re-recording.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import nbdurable as nd
from nbdurable.models._base import ModelRequest
from nbdurable.runtime import Agent

SECRET = "nbdurable-recorded-histories"
"""The approval secret the histories were recorded with (their tokens verify with it)."""


@nd.tool
async def step(n: int, ctx: nd.ToolContext) -> str:
    """Do step n (safe to re-run)."""
    return f"step {n} done"


@nd.tool(needs_approval=True)
def drop_table(name: str, ctx: nd.ToolContext) -> str:
    """Drop a warehouse table."""
    return f"dropped {name}"


def _slow(ctx: nd.ToolContext) -> float:
    """How long the slow tools take (the recorder's workers set it); says the call started.

    The call's start is a file named by its run in ``NBDURABLE_HISTORY_MARKS``: a
    call inside a ``model_step`` shows in the events only once it ran.
    """
    marks = os.environ.get("NBDURABLE_HISTORY_MARKS")
    if marks:
        with open(os.path.join(marks, ctx.run_id), "w"):
            pass
    return float(os.environ.get("NBDURABLE_HISTORY_SLOW", "5"))


@nd.tool
async def slow_step(n: int, ctx: nd.ToolContext) -> str:
    """Do a slow step n (safe to re-run)."""
    await asyncio.sleep(_slow(ctx))
    return f"slow step {n} done"


@nd.tool
async def slow_manual(n: int, ctx: nd.ToolContext) -> str:
    """Do a slow manual step n (not safe to re-run on its own)."""
    await asyncio.sleep(_slow(ctx))
    return f"manual step {n} done"


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


def _echo(request: ModelRequest) -> nd.Turn:
    first = next(m for m in request.messages if m.role == "user")
    return nd.Turn(text=f"echo({first.text})")


async def split(ctx: nd.TaskContext, state: Any) -> Any:
    """Two owned runs at once."""
    first, second = await asyncio.gather(
        ctx.spawn_agent("echo", f"part one of {state['topic']}"),
        ctx.spawn_agent("echo", f"part two of {state['topic']}"),
    )
    return {**state, "parts": [first.text, second.text]}


async def combine(ctx: nd.TaskContext, state: Any) -> Any:
    """One owned run."""
    summary = await ctx.spawn_agent("echo", "combine " + " + ".join(state["parts"]))
    return {"topic": state["topic"], "summary": summary.text, "parts": len(state["parts"])}


async def wait_for_approval(ctx: nd.TaskContext, state: Any) -> Any:
    """An owned run that parks on its approval."""
    return (await ctx.spawn_agent("janitor", "Clean up stale staging tables.")).text


agents = [
    Agent(
        "janitor",
        model=nd.ScriptedModel(
            [
                nd.Turn.call("step", n=1),
                nd.Turn.call("drop_table", name="stg_2023"),
                nd.Turn.call("step", n=2),
                "Done: dropped stg_2023.",
            ]
        ),
        tools=[step, drop_table],
        version="1",
        tool_recovery={"step": "safe", "drop_table": "idempotent"},
        stream=True,
    ),
    Agent(
        "flaky",
        model=nd.ScriptedModel(["Answered on a later attempt."], fail_on={1: RuntimeError("503")}),
        version="1",
        model_retry={"max_attempts": 3, "initial_delay_ms": 1500, "max_delay_ms": 1500},
    ),
    Agent(
        "delegator",
        model=nd.ScriptedModel(
            [
                nd.Turn.call("summarizer", prompt="Summarize the warehouse."),
                nd.Turn.call("oracle", prompt="Predict tomorrow's load."),
                nd.Turn.call("researcher", prompt="Find and drop the temporary table."),
                _results,
            ]
        ),
        tools=_sub_agents(),
        version="1",
        tool_recovery={"summarizer": "safe", "oracle": "safe", "researcher": "safe"},
    ),
    Agent("echo", nd.ScriptedModel([_echo] * 1000, mode="sequential"), version="1"),
    # added with the needs_attention, timeout and drain recordings (issue 39)
    Agent(
        "careful",
        model=nd.ScriptedModel([nd.Turn.call("slow_manual", n=1), "Manual step settled."]),
        tools=[slow_manual],
        version="1",
        tool_recovery={"slow_manual": "manual"},
    ),
    Agent(
        "sleeper",
        model=nd.ScriptedModel([nd.Turn.call("slow_step", n=1), "Slept."]),
        tools=[slow_step],
        version="1",
        tool_recovery={"slow_step": "safe"},
    ),
]
tasks = [
    nd.define_task("digest", split, combine, agents=["echo"]),
    nd.define_task("waiter", wait_for_approval, agents=["janitor"]),
]
