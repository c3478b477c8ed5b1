"""A Temporal worker that polls its task queue only, not the definitions' queues.

``build_worker`` without ``build_definition_workers``: what a host of its own
that leaves them out runs, or a release from before them. A run's activity that
another worker hands back waits on its definition's queue, which this worker
never polls, until the wait ends and it goes back to the task queue.

    python -m support.temporal_main_queue_worker --address A --task-queue Q --store URL --agents SPEC

The options are the worker's (``nbdurable worker --engine temporal``; others are
ignored). Prints ``polling`` once it polls, then runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from temporalio.client import Client

from nbdurable.cli._agents import load_all
from nbdurable.stores import open_store
from nbdurable.temporal import build_worker
from nbdurable.temporal._registry import worker_runtime


async def main(address: str, queue: str, store_url: str, agents: list[str]) -> None:
    client = await Client.connect(address)
    store = open_store(store_url)
    worker = build_worker(client, task_queue=queue, store=store, agents=load_all(agents))
    runtime = worker_runtime()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        await runtime.__aenter__()
        try:
            print("nbdurable worker (main queue only) polling", flush=True)
            await stop.wait()
        finally:
            await runtime.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--agents", action="append", required=True)
    args, _ = parser.parse_known_args()
    asyncio.run(main(args.address, args.task_queue, args.store, args.agents))
    sys.stdout.flush()
    os._exit(0)  # temporalio's threads may still hold thread states (sdk-python#300)
