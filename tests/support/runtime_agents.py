"""Agents the runtime crash tests hand to `nbdurable worker` subprocesses.

Every tool execution appends one line to the file named by NBDURABLE_TEST_LOG
(O_APPEND, fsync'd before the tool returns), so the tests can count executions
across SIGKILLs.
"""

from __future__ import annotations

import asyncio
import os
import random

import nbdurable as nd
from nbdurable.runtime import Agent


def _log(line: str) -> None:
    path = os.environ.get("NBDURABLE_TEST_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


@nd.tool
async def safe_probe(n: int, ctx: nd.ToolContext) -> str:
    """Probe something harmless (safe to re-run)."""
    _log(f"safe {ctx.run_id} {ctx.tool_call_id}")
    await asyncio.sleep(random.uniform(0.02, 0.15))
    return f"probe {n} ok " + "x" * 50


@nd.tool
async def manual_charge(amount: int, ctx: nd.ToolContext) -> str:
    """Charge a card (never re-run without a human)."""
    _log(f"manual {ctx.run_id} {ctx.tool_call_id}")
    await asyncio.sleep(random.uniform(0.02, 0.15))
    return f"charged {amount} with key {ctx.idempotency_key}"


@nd.tool
async def slow_step(seconds: float, ctx: nd.ToolContext) -> str:
    """Take a while."""
    _log(f"slow {ctx.run_id} {ctx.tool_call_id}")
    await asyncio.sleep(seconds)
    return "slept"


def _model() -> nd.ScriptedModel:
    return nd.ScriptedModel(
        [
            nd.Turn.call("safe_probe", "first I probe the system carefully", n=1),
            nd.Turn.call("manual_charge", "now I charge the card once", amount=5),
            nd.Turn.call("safe_probe", "and probe again to be sure", n=2),
            "All done: probed, charged and probed again.",
        ],
        stream_delay=0.01,
    )


torture = Agent(
    "torture",
    _model(),
    [safe_probe, manual_charge],
    version="1",
    stream=True,
    tool_recovery={"safe_probe": "safe", "manual_charge": "manual"},
)

single = Agent(
    "single",
    nd.ScriptedModel([nd.Turn.call("safe_probe", n=7), "ok"]),
    [safe_probe],
    version="1",
    tool_recovery={"safe_probe": "idempotent"},
)

sleeper = Agent(
    "sleeper",
    nd.ScriptedModel([nd.Turn.call("slow_step", seconds=2.0), "woke up"]),
    [slow_step],
    version="1",
    tool_recovery={"slow_step": "safe"},
)


@nd.tool
async def slow_charge(amount: int, ctx: nd.ToolContext) -> str:
    """Charge slowly (manual recovery)."""
    _log(f"manual {ctx.run_id} {ctx.tool_call_id}")
    await asyncio.sleep(1.5)
    return f"charged {amount}"


charger = Agent(
    "charger",
    nd.ScriptedModel([nd.Turn.call("slow_charge", amount=9), "charged"]),
    [slow_charge],
    version="1",
    tool_recovery={"slow_charge": "manual"},
)

agents = [torture, single, sleeper, charger]
