"""Agents whose one tool call takes a while, for the graceful-drain tests (both engines).

Each tool execution appends ``start <run_id> <call_id> <pid>`` when it starts
and ``end ...`` when it returns to the file named by NBDURABLE_TEST_LOG
(fsync'd), so the tests count what ran, and what finished, across processes.
``NBDURABLE_TEST_SLOW`` sets the call's seconds (4 by default).
"""

from __future__ import annotations

import asyncio
import os

import nbdurable as nd
from nbdurable.runtime import Agent


def _log(kind: str, ctx: nd.ToolContext) -> None:
    path = os.environ.get("NBDURABLE_TEST_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{kind} {ctx.run_id} {ctx.tool_call_id} {os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


async def _work(ctx: nd.ToolContext) -> None:
    _log("start", ctx)
    await asyncio.sleep(float(os.environ.get("NBDURABLE_TEST_SLOW", "4")))
    _log("end", ctx)


@nd.tool
async def long_safe(n: int, ctx: nd.ToolContext) -> str:
    """Do a long job n (safe to re-run)."""
    await _work(ctx)
    return f"job {n} done"


@nd.tool
async def long_manual(n: int, ctx: nd.ToolContext) -> str:
    """Do a long job n (never re-run without a human)."""
    await _work(ctx)
    return f"job {n} done"


def lines(path: os.PathLike[str] | str) -> list[tuple[str, str]]:
    """Every logged line as (kind, pid), in order."""
    if not os.path.exists(path):
        return []
    with open(path) as file:
        rows = [line.split() for line in file.read().splitlines() if line.strip()]
    return [(row[0], row[3]) for row in rows]


agents = [
    Agent(
        "drain_safe",
        nd.ScriptedModel([nd.Turn.call("long_safe", n=1), "drained safely"]),
        [long_safe],
        version="1",
        tool_recovery={"long_safe": "safe"},
    ),
    Agent(
        "drain_manual",
        nd.ScriptedModel([nd.Turn.call("long_manual", n=1), "drained by hand"]),
        [long_manual],
        version="1",
        tool_recovery={"long_manual": "manual"},
    ),
]
