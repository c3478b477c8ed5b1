"""An async ``generate_text`` run with a SQLite session, to be killed with SIGKILL mid-run.

Run as a script (``python loop_crash.py DB STEPS``), it runs the loop on one
run id and prints ``tool <i>`` from inside step ``i``'s tool: by then step
``i``'s tool-call event and the checkpoint of step ``i - 1`` are committed.
Imported, it gives the model and tool the script uses, for a resume.
"""

from __future__ import annotations

import asyncio
import sys

import nbdurable as nd

RUN_ID = "crash-loop"
RESULT = "r" * 400


def model(steps: int) -> nd.ScriptedModel:
    """``steps`` tool steps, then the answer (the turn is chosen by the history's length)."""
    return nd.ScriptedModel([*(nd.Turn.call("probe", i=i) for i in range(steps)), "all probed"])


def probe_tool(announce: bool) -> nd.Tool:
    """The tool; ``announce`` prints ``tool <i>`` for the killer to read."""

    @nd.tool
    def probe(i: int) -> str:
        """Probe a value."""
        if announce:
            print(f"tool {i}", flush=True)
        return f"{i}:{RESULT}"

    return probe


async def _main(path: str, steps: int) -> None:
    store = nd.SqliteSessionStore(path)
    await nd.generate_text(
        model=model(steps),
        messages="Probe everything.",
        tools=[probe_tool(True)],
        max_steps=steps + 2,
        session=nd.DurableSession(store, run_id=RUN_ID),
    )
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], int(sys.argv[2])))
