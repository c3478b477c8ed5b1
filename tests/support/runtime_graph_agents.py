"""Agents and a task the graph and task crash tests hand to `nbdurable worker` subprocesses.

Each tool execution and each phase start appends one line to the file named by
NBDURABLE_TEST_LOG (see runtime_agents.py), so executions can be counted across SIGKILLs.
"""

from __future__ import annotations

import asyncio
from typing import Any

import nbdurable as nd
from nbdurable.models._base import ModelRequest
from nbdurable.runtime import Agent
from support.runtime_agents import _log


@nd.tool
async def step(name: str, seconds: float, ctx: nd.ToolContext) -> str:
    """Do one named step, taking ``seconds``."""
    _log(f"step {ctx.run_id} {name}")
    await asyncio.sleep(seconds)
    return f"{name} done"


def _turn(request: ModelRequest) -> nd.Turn:
    """First call ``step`` named by the prompt's first word (seconds: its second), then finish."""
    first = next(m for m in request.messages if m.role == "user")
    name, seconds = first.text.split()[:2]
    if request.messages[-1].role == "user":
        return nd.Turn.call("step", name=name, seconds=float(seconds))
    return nd.Turn(text=f"{name} finished")


stepper = Agent(
    "stepper",
    nd.ScriptedModel([_turn, _turn]),
    [step],
    version="1",
    tool_recovery={"step": "safe"},
)


async def gather(ctx: nd.TaskContext, state: Any) -> Any:
    """Spawn an owned run and keep its answer."""
    _log(f"phase {ctx.run_id} gather")
    result = await ctx.spawn_agent("stepper", "g 0.05")
    return {"gathered": result.text}


async def slow(ctx: nd.TaskContext, state: Any) -> Any:
    """Take a while (the crash test kills the worker in here)."""
    _log(f"phase {ctx.run_id} slow")
    await asyncio.sleep(1.5)
    return {**state, "slow": True}


async def finish(ctx: nd.TaskContext, state: Any) -> Any:
    """Mark the state done."""
    _log(f"phase {ctx.run_id} finish")
    return {**state, "done": True}


report = nd.define_task("report", gather, slow, finish, agents=["stepper"])

agents = [stepper]
tasks = [report]
