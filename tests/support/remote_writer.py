"""Another process changing runs of a shared store, directly (not through a slow proxy).

``python remote_writer.py STORE_URL ACTION...`` where each ACTION is
``park:RUN_ID`` (submit a run of agent ``elsewhere``, which only this process
serves, and wait until it asks for an approval), ``cancel:RUN_ID``,
``graph:GRAPH_ID`` (a one-node graph of agent ``echo``, completed) or
``task:RUN_ID`` (task ``tidy`` from ``{"n": 1}``, completed with ``{"n": 2}``);
actions run in order, then the process prints ``done`` and exits (parked runs
stay ``waiting_approval``).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime


@nd.tool(needs_approval=True)
def publish() -> str:
    """Publish."""
    return "published"


async def tidy(ctx: Any, state: Any) -> Any:
    return {"n": state["n"] + 1}


async def main(store_url: str, actions: list[str]) -> None:
    store = nd.open_store(store_url)
    agent = Agent(
        "elsewhere", nd.ScriptedModel([nd.Turn.call("publish"), "done"]), [publish], version="1"
    )
    echo = Agent("echo", nd.ScriptedModel(["echoed"]), [], version="1")
    try:
        async with await DurableRuntime.open(
            store=store, agents=[agent, echo], tasks=[nd.define_task("tidy", tidy)]
        ) as runtime:
            for action in actions:
                verb, run_id = action.split(":", 1)
                if verb == "park":
                    run = await runtime.submit("elsewhere", "Publish.", run_id=run_id)
                    await run.wait("waiting_approval", timeout=60)
                elif verb == "cancel":
                    await (await runtime.get_run(run_id)).cancel()
                elif verb == "graph":
                    nodes = [{"id": "only", "agent": "echo", "prompt": "Hi."}]
                    graph = await runtime.submit_graph(nodes, graph_id=run_id)
                    assert await graph.wait(timeout=60) == "completed"
                elif verb == "task":
                    task = await runtime.submit_task("tidy", {"n": 1}, run_id=run_id)
                    assert await task.result() == {"n": 2}
                else:
                    raise SystemExit(f"unknown action {action!r}")
    finally:
        store.close()
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
