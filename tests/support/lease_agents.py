"""Agents the lease tests hand to `nbdurable worker` subprocesses.

Each tool appends ``start <pid> <run_id> <call_id>`` to the file named by
NBDURABLE_TEST_LOG when it begins and ``effect <pid> <run_id> <call_id>`` when it
performs its side effect (O_APPEND, fsync'd), so a test counts side effects across
SIGSTOP, SIGCONT and SIGKILL. ``NBDURABLE_TEST_TOOL_SECONDS`` sets how long a tool
works before its side effect (default 1.0).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

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


def _seconds() -> float:
    return float(os.environ.get("NBDURABLE_TEST_TOOL_SECONDS", "1.0"))


@nd.tool
async def pay_careless(amount: int, ctx: nd.ToolContext) -> str:
    """Pay (does not check its lease before acting)."""
    _log(f"start {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    await asyncio.sleep(_seconds())
    _log(f"effect {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    return f"paid {amount} by {os.getpid()}"


@nd.tool
async def pay_careful(amount: int, ctx: nd.ToolContext) -> str:
    """Pay (confirms it still owns the run right before acting)."""
    _log(f"start {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    await asyncio.sleep(_seconds())
    ctx.ensure_owner()
    _log(f"effect {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    return f"paid {amount} by {os.getpid()}"


def _pay_in_thread(amount: int, ctx: nd.ToolContext, check: bool) -> str:
    import time

    time.sleep(_seconds())
    if check:
        ctx.ensure_owner()  # from a worker thread, not the loop's
    _log(f"effect {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    return f"paid {amount} by {os.getpid()}"


@nd.tool
async def pay_threaded(amount: int, ctx: nd.ToolContext) -> str:
    """Pay from a worker thread (a blocking client), checking the lease there."""
    _log(f"start {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    return await asyncio.to_thread(_pay_in_thread, amount, ctx, True)


@nd.tool
async def pay_careless_threaded(amount: int, ctx: nd.ToolContext) -> str:
    """Pay from a worker thread, without checking the lease."""
    _log(f"start {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    return await asyncio.to_thread(_pay_in_thread, amount, ctx, False)


@nd.tool
def pay_blocking(amount: int, ctx: nd.ToolContext) -> str:
    """Pay from a plain function (it blocks the worker's loop), without checking the lease.

    Woken after a pause it finishes at once: its effect happens before the worker
    can notice it lost the run (what makes a late result certain in a test).
    """
    import time

    _log(f"start {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    time.sleep(_seconds())
    _log(f"effect {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    return f"paid {amount} by {os.getpid()}"


@nd.tool
async def long_step(ctx: nd.ToolContext) -> str:
    """Work for a while (safe to re-run)."""
    _log(f"start {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    await asyncio.sleep(_seconds())
    _log(f"effect {os.getpid()} {ctx.run_id} {ctx.tool_call_id}")
    return f"done by {os.getpid()}"


def _payer(name: str, tool: nd.Tool) -> Agent:
    return Agent(
        name,
        nd.ScriptedModel([nd.Turn.call(tool.name, amount=5), "paid"]),
        [tool],
        version="1",
        tool_recovery={tool.name: "manual"},
    )


careless = _payer("careless", pay_careless)
careful = _payer("careful", pay_careful)
threaded = _payer("threaded", pay_threaded)
careless_threaded = _payer("careless_threaded", pay_careless_threaded)
blocking = _payer("blocking", pay_blocking)
worker_agent = Agent(
    "long",
    nd.ScriptedModel([nd.Turn.call("long_step"), "done"]),
    [long_step],
    version="1",
    tool_recovery={"long_step": "safe"},
)

agents = [careless, careful, threaded, careless_threaded, blocking, worker_agent]


def entries(log: Path) -> list[tuple[str, int, str, str]]:
    """``(kind, pid, run_id, call_id)`` per logged line."""
    if not log.exists():
        return []
    rows = []
    for line in log.read_text().splitlines():
        if line.strip():
            kind, pid, run_id, call = line.split()
            rows.append((kind, int(pid), run_id, call))
    return rows


def effects(log: Path) -> Counter[str]:
    """Run id -> how many side effects its tool performed."""
    return Counter(run_id for kind, _pid, run_id, _call in entries(log) if kind == "effect")


def starts(log: Path) -> list[int]:
    """The pids of the tool starts, in order."""
    return [pid for kind, pid, _run, _call in entries(log) if kind == "start"]
