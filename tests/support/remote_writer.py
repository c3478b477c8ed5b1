"""Another process changing runs of a shared store (the record mirror's test).

``python remote_writer.py STORE_URL RUN_ID NEW_RUN_ID`` cancels RUN_ID, then
submits a run with id NEW_RUN_ID of an agent ``elsewhere`` that only this
process serves, and exits (the new run is left as it is).
"""

from __future__ import annotations

import asyncio
import sys

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime


async def main(store_url: str, run_id: str, new_run_id: str) -> None:
    store = nd.open_store(store_url)
    agent = Agent("elsewhere", nd.ScriptedModel(["done"]), [], version="1")
    try:
        async with await DurableRuntime.open(store=store, agents=[agent]) as runtime:
            await (await runtime.get_run(run_id)).cancel()
            await runtime.submit("elsewhere", "Hello.", run_id=new_run_id)
    finally:
        store.close()
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
