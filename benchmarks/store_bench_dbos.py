"""The store benchmark's loop as a DBOS Transact workflow on SQLite (default settings).

Each step of the loop is two durable DBOS steps: the model turn (a tool call, or
the final answer) and the tool's result; DBOS records each step's output in its
system database, so a restarted workflow replays them instead of running them
again. The workflow keeps the conversation in memory, as nbdurable's loop does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class DbosRun:
    """What one DBOS run measured."""

    total_s: float
    stamps: list[float]  # perf_counter at each tool call
    messages: int
    steps_recorded: int  # rows of DBOS's operation_outputs for the workflow
    measured: Any = None  # what ``measure`` returned while DBOS was still running


def dbos_run(
    n: int, db: Path, tool_result: Callable[[int], str], measure: Callable[[], Any] | None = None
) -> DbosRun:
    """Run n tool steps and a final answer as one DBOS workflow; the database is ``db``.

    ``measure`` is called after the run, before DBOS shuts down (its files still open).
    The workflow returns the final answer, as an agent workflow would.
    """
    import sqlite3

    from dbos import DBOS, DBOSConfig

    stamps: list[float] = []
    usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    config: DBOSConfig = {"name": "nbdurable-bench", "system_database_url": f"sqlite:///{db}"}
    DBOS(config=config)

    @DBOS.step()
    def model_turn(i: int) -> dict[str, Any]:
        # Plays the same script as nbdurable's ScriptedModel in sequential mode.
        if i < n:
            call = {"id": f"call_{i}", "name": "probe", "args": {"i": i}}
            return {"role": "assistant", "tool_calls": [call], "usage": usage}
        return {"role": "assistant", "content": "Done.", "usage": usage}

    @DBOS.step()
    def probe(i: int) -> str:
        stamps.append(time.perf_counter())
        return tool_result(i)

    @DBOS.workflow()
    def agent(prompt: str) -> tuple[str, int]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for i in range(n + 1):
            turn = model_turn(i)
            messages.append(turn)
            for call in turn.get("tool_calls", ()):
                result = probe(call["args"]["i"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        return str(messages[-1]["content"]), len(messages)

    DBOS.launch()
    try:
        started = time.perf_counter()
        answer, messages = agent("Probe the system.")
        total = time.perf_counter() - started
        measured = measure() if measure is not None else None
    finally:
        DBOS.destroy(destroy_registry=True)
    conn = sqlite3.connect(db)
    try:
        (recorded,) = conn.execute("SELECT count(*) FROM operation_outputs").fetchone()
    finally:
        conn.close()
    assert len(stamps) == n, f"expected {n} tool calls, saw {len(stamps)}"
    assert answer == "Done.", answer
    return DbosRun(total, stamps, messages, int(recorded), measured)
