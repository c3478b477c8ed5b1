"""``close()`` arriving while a leg's end is being written keeps that end.

The end is written on a store thread; a cancellation that arrives meanwhile is
raised once the write returned. The leg must not then hand the run back as
``pending`` over the ``waiting_approval`` it just wrote.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from support.gated_janitor import gated

import nbdurable as nd
from nbdurable.runs import RunPatch
from nbdurable.runtime import DurableRuntime


async def test_a_run_that_reached_waiting_approval_stays_there_after_close(tmp_path: Path) -> None:
    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    writing, proceed = threading.Event(), threading.Event()
    update = store.rt_update  # type: ignore[attr-defined]

    def held_update(run_id: str, changes: RunPatch, **kwargs: Any) -> Any:
        if changes.state == "waiting_approval":
            writing.set()
            proceed.wait(30)
        return update(run_id, changes, **kwargs)

    store.rt_update = held_update  # type: ignore[attr-defined]
    try:
        rt = await DurableRuntime.open(store=store, agents=[gated([])])
        run = await rt.submit("janitor", "Clean up.")
        assert await asyncio.to_thread(writing.wait, 30)
        closing = asyncio.ensure_future(rt.close())  # cancels the leg mid-write
        await asyncio.sleep(0.2)
        proceed.set()
        await asyncio.wait_for(closing, 30)
        record = store.rt_get(run.run_id)  # type: ignore[attr-defined]
        assert record is not None
        assert (record.state, record.lease_owner) == ("waiting_approval", None)
        states = [
            e.payload["state"] for e in store.read_events(run.run_id) if e.type == "run_state"
        ]  # type: ignore[attr-defined]
        assert states[-1] == "waiting_approval"
    finally:
        proceed.set()
        store.close()
