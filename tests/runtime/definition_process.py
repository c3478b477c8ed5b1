"""A process (a notebook kernel, in effect) defining agent ``janitor`` v1 in its own __main__.

``python definition_process.py ROLE SCRIPT STORE_URL [RUN_ID]``:

- ``SCRIPT`` ``x``: notebook A's janitor (a callable first turn that calls
  ``sweep``, then A's text); ``y``: notebook B's (another tool, another text).
- ``ROLE`` ``submit``: submit a run with a runtime that is never started (it
  executes nothing), print its id; ``serve``: open a runtime, print ``ready``,
  execute whatever it may until SIGTERM; ``execute``: open a runtime, wait for
  ``RUN_ID``'s result and print its text; ``fingerprint``: print the fingerprint.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime

ROLE, SCRIPT, URL = sys.argv[1], sys.argv[2], sys.argv[3]
RUN_ID = sys.argv[4] if len(sys.argv) > 4 else "run-fingerprint"


@nd.tool
def sweep(table: str) -> str:
    """Sweep a staging table."""
    return f"swept {table}"


@nd.tool
def vacuum(name: str) -> str:
    """Vacuum a database."""
    return f"vacuumed {name}"


if SCRIPT == "x":
    janitor = Agent(
        "janitor",
        nd.ScriptedModel(
            [lambda request: nd.Turn.call("sweep", table="stg_a"), "Notebook A swept stg_a."]
        ),
        tools=[sweep],
        version="1",
        tool_recovery={"sweep": "safe"},
    )
else:
    janitor = Agent(
        "janitor",
        nd.ScriptedModel(["Notebook B's janitor answered."]),
        tools=[vacuum],
        version="1",
    )


async def main() -> None:
    store = nd.open_store(URL)
    if ROLE == "fingerprint":
        print(janitor.fingerprint(), flush=True)
    elif ROLE == "submit":
        runtime = DurableRuntime(store=store, agents=[janitor])
        run = await runtime.submit("janitor", "Clean up the staging tables.", run_id=RUN_ID)
        print(run.run_id, flush=True)
    elif ROLE == "serve":
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with DurableRuntime(store=store, agents=[janitor], poll_interval=0.02):
            print("ready", flush=True)
            await stop.wait()
    else:
        async with DurableRuntime(store=store, agents=[janitor], poll_interval=0.02) as runtime:
            run = await runtime.get_run(RUN_ID)
            result = await asyncio.wait_for(run.result(), 60)
            print(result.text, flush=True)
    store.close()


asyncio.run(main())
