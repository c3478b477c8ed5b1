"""Tool executions worker subprocesses recorded (temporal_agents' side table), and run states."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any


def tool_rows(path: Path) -> list[tuple[str, str]]:
    """Every execution as (tool, worker pid), in order."""
    if not path.exists():
        return []
    db = sqlite3.connect(path, timeout=30)
    try:
        return [(r[0], r[1]) for r in db.execute("SELECT tool, pid FROM runs").fetchall()]
    except sqlite3.OperationalError:  # the table is not there yet
        return []
    finally:
        db.close()


def tool_counts(path: Path) -> dict[str, int]:
    """Executions per tool call (``run_id/tool_call_id``)."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT run_id, call_id, count(*) FROM runs GROUP BY run_id, call_id"
        ).fetchall()
    finally:
        db.close()
    return {f"{run_id}/{call_id}": n for run_id, call_id, n in rows}


def run_states(store: Any, run_id: str) -> list[str]:
    """The states a run went through, from its ``run_state`` events."""
    return [e.payload["state"] for e in store.read_events(run_id) if e.type == "run_state"]


async def started(path: Path, tool: str | None = None, timeout: float = 30) -> None:
    """Wait until ``tool`` (any tool when None) has started executing."""
    deadline = time.monotonic() + timeout
    while not any(tool in (None, name) for name, _ in tool_rows(path)):
        assert time.monotonic() < deadline, f"{tool or 'no tool'} never started"
        await asyncio.sleep(0.05)
