"""A process that writes a parked run's ``waiting_approval`` state again, with a notifier.

``python notify_claimer.py STORE_URL RUN_ID NOTIFY_URL START_AT`` opens the
store, waits until the wall clock reaches START_AT (so several processes race),
writes the state the way a leg's end written twice does (``set_state``) and
waits for its notifier. The notify secret comes from NBDURABLE_NOTIFY_SECRET.
"""

from __future__ import annotations

import asyncio
import sys
import time

import nbdurable as nd
from nbdurable.runs import RunPatch
from nbdurable.runtime import DurableRuntime, Notifier


async def main(store_url: str, run_id: str, notify_url: str, start_at: float) -> None:
    store = nd.open_store(store_url)
    try:
        notifier = Notifier(notify_url, backoff=0.05)
        async with await DurableRuntime.open(store=store, notify=notifier) as runtime:
            await asyncio.sleep(max(0.0, start_at - time.time()))
            runtime.set_state(run_id, RunPatch(state="waiting_approval"))
            assert notifier.drain(timeout=60)
    finally:
        store.close()
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
