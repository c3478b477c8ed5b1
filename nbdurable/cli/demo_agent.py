"""The demo's agent: a warehouse janitor on the offline ScriptedModel, and its crashing leg.

The script reacts to the human: an approved ``drop_table(name='stg_2024')`` leads
to a second, riskier call (``orders``); a denial makes the model back off.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from ..messages import ToolResultPart
from ..models._base import ModelRequest
from ..models._scripted import ScriptedModel, Turn
from ..runtime._agent import Agent
from ..tools import tool

__all__ = ["AGENT_ID", "CRASH_AFTER_DELTAS", "LEASE_MS", "PROMPT", "crash_leg", "janitor"]

AGENT_ID = "janitor"
PROMPT = "Clean up the stale tables in the warehouse."
LEASE_MS = 800
"""The crashing worker's lease: how long the next owner waits before taking over."""
CRASH_AFTER_DELTAS = 3
"""The crashing worker dies once it has streamed this many tokens of step 1."""
TOKEN_DELAY = 0.05

TABLES = {"stg_2024": "last read 41 days ago", "orders": "last read 95 days ago"}


@tool
def list_tables() -> dict[str, str]:
    """List the warehouse tables and when they were last read."""
    return dict(TABLES)


@tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a warehouse table (a human approves each call)."""
    return f"dropped {name}"


def _last_result(request: ModelRequest) -> ToolResultPart | None:
    results = request.messages[-1].tool_results if request.messages else ()
    return results[0] if results else None


def _after_stg(request: ModelRequest) -> Turn | str:
    result = _last_result(request)
    if result is not None and result.is_error:
        return "Understood: I left stg_2024 in place. Nothing was dropped."
    return Turn.call(
        "drop_table",
        "Dropped stg_2024. orders has not been read for 95 days either; dropping it too.",
        name="orders",
    )


def _after_orders(request: ModelRequest) -> str:
    result = _last_result(request)
    if result is not None and result.is_error:
        return (
            f"Understood, orders stays ({result.result}). Summary: dropped stg_2024, kept orders."
        )
    return "Summary: dropped stg_2024 and orders."


def janitor() -> Agent:
    """A fresh demo agent (streamed, so its tokens reach the terminal as they come)."""
    model = ScriptedModel(
        [
            Turn.call("list_tables", "Let me look at the warehouse tables first."),
            Turn.call(
                "drop_table",
                "stg_2024 is a staging table nobody has read for 41 days: I will drop it.",
                name="stg_2024",
            ),
            _after_stg,
            _after_orders,
        ],
        stream_delay=TOKEN_DELAY,
    )
    return Agent(
        AGENT_ID,
        model,
        [list_tables, drop_table],
        version="1",
        stream=True,
        tool_recovery={"list_tables": "safe"},
    )


def _die() -> None:
    sys.stdout.flush()
    if hasattr(signal, "SIGKILL"):
        os.kill(os.getpid(), signal.SIGKILL)  # no clean-up at all: a real crash
    os._exit(137)


async def _leg(url: str, run_id: str) -> None:
    from ..events._model import MODEL_DELTA
    from ..runtime._runtime import DurableRuntime
    from ..stores import open_store
    from ._follow import EventPrinter

    store: Any = open_store(url)
    runtime = await DurableRuntime.open(
        store=store, agents=[janitor()], lease_ms=LEASE_MS, poll_interval=0.02
    )
    run = await runtime.submit(AGENT_ID, PROMPT, run_id=run_id)
    printer = EventPrinter(states=False)
    streamed = 0
    async for event in run.stream():
        printer.show(event)
        if event.type == MODEL_DELTA and (event.step_index or 0) >= 1:
            streamed += 1
            if streamed >= CRASH_AFTER_DELTAS:
                _die()


def crash_leg() -> None:
    """The child process: submit the run, stream it, die by SIGKILL inside step 1.

    ``python -c "from nbdurable.cli.demo_agent import crash_leg; crash_leg()" URL RUN_ID``
    """
    url, run_id = sys.argv[1], sys.argv[2]
    asyncio.run(_leg(url, run_id))
    sys.exit(3)  # never reached: the leg dies in step 1
