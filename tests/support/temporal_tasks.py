"""Tasks and graph agents the Temporal tests hand to worker subprocesses.

``agents`` holds temporal_agents' agents plus ``echo``; ``tasks`` the custom tasks.
Phase executions and ``echo`` model calls insert one row each into the SQLite side
table ``calls`` of the file named by NBDURABLE_TEST_TOOLS, so the tests count
executions across SIGKILLs and workers. ``echo`` fails on a prompt listed in the
file named by NBDURABLE_TEST_BROKEN (one prompt a line), while that file exists.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any

import nbdurable as nd
from nbdurable.models._base import ModelRequest
from nbdurable.runtime import Agent
from support import temporal_agents


def count(kind: str, key: str) -> None:
    """Record one execution (committed before the caller goes on)."""
    path = os.environ.get("NBDURABLE_TEST_TOOLS")
    if not path:
        return
    db = sqlite3.connect(path, timeout=30)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS calls (kind, key, pid)")
        db.execute("INSERT INTO calls VALUES (?, ?, ?)", (kind, key, os.getpid()))
        db.commit()
    finally:
        db.close()


def counted(path: Path, kind: str | None = None) -> dict[str, int]:
    """Executions per key in the side table at ``path`` (of one kind, or of all)."""
    if not path.exists():
        return {}
    db = sqlite3.connect(path, timeout=30)
    try:
        rows = db.execute("SELECT kind, key FROM calls").fetchall()
    except sqlite3.OperationalError:  # no call yet
        return {}
    finally:
        db.close()
    counts: dict[str, int] = {}
    for row_kind, key in rows:
        if kind is None or row_kind == kind:
            counts[key] = counts.get(key, 0) + 1
    return counts


def _broken(head: str) -> bool:
    path = os.environ.get("NBDURABLE_TEST_BROKEN")
    if not path or not os.path.exists(path):
        return False
    return head in Path(path).read_text().splitlines()


def _echo(request: ModelRequest) -> nd.Turn:
    first = next(m for m in request.messages if m.role == "user")
    head = first.content[0].text if isinstance(first.content[0], nd.TextPart) else "media"
    count("model", head)
    if _broken(head):
        raise RuntimeError(f"model broke on {head}")
    return nd.Turn(text=f"echo({first.text})")


echo = Agent("echo", nd.ScriptedModel([_echo] * 1000, mode="sequential"), version="1")


async def split(ctx: nd.TaskContext, state: Any) -> Any:
    """Two owned runs at once."""
    count("phase", f"{ctx.run_id}:{ctx.phase}")
    first, second = await asyncio.gather(
        ctx.spawn_agent("echo", f"part one of {state['topic']}"),
        ctx.spawn_agent("echo", f"part two of {state['topic']}"),
    )
    return {**state, "parts": [first.text, second.text]}


async def combine(ctx: nd.TaskContext, state: Any) -> Any:
    """One owned run, then a pause (NBDURABLE_TEST_SLOW seconds) to be killed in."""
    count("phase", f"{ctx.run_id}:{ctx.phase}")
    summary = await ctx.spawn_agent("echo", "combine " + " + ".join(state["parts"]))
    count("paused", f"{ctx.run_id}:{ctx.phase}")
    await asyncio.sleep(float(os.environ.get("NBDURABLE_TEST_SLOW", "0")))
    return {"topic": state["topic"], "summary": summary.text, "parts": len(state["parts"])}


async def wait_for_approval(ctx: nd.TaskContext, state: Any) -> Any:
    """An owned run that parks on its approval."""
    return (await ctx.spawn_agent("janitor", "Clean up stale staging tables.")).text


async def first(ctx: nd.TaskContext, state: Any) -> Any:
    """Add one."""
    count("phase", f"{ctx.run_id}:{ctx.phase}")
    return state + 1


async def second(ctx: nd.TaskContext, state: Any) -> Any:
    """Add ten, or raise while ``second`` is listed in NBDURABLE_TEST_BROKEN."""
    count("phase", f"{ctx.run_id}:{ctx.phase}")
    if _broken("second"):
        raise ValueError("not today")
    return state + 10


async def sleepy(ctx: nd.TaskContext, state: Any) -> Any:
    """A phase longer than any timeout the tests give."""
    await asyncio.sleep(60)
    return state


agents = [*temporal_agents.agents, echo]
tasks = [
    nd.define_task("digest", split, combine, agents=["echo"]),
    nd.define_task("waiter", wait_for_approval, agents=["janitor"]),
    nd.define_task("two", first, second),
    nd.define_task("sleepy", sleepy),
]
