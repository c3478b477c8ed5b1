"""A leg's end written on the event loop's thread (issue 42), and what it must keep.

On SQLite a run's end (its state events, then its record) runs on the loop's
thread when no store call in it waits; a call that would wait sends the whole
end to a store thread, run again from the start. What the first try wrote is
not written twice: the log holds one ``completed`` state and one terminal event.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbdurable as nd
from nbdurable.durable._offload import WouldWait
from nbdurable.runtime import Agent, DurableRuntime


async def test_an_end_that_would_wait_after_its_events_writes_them_once(tmp_path: Path) -> None:
    """The record's write would wait on the loop (after the events were appended):
    the end is finished on a store thread without appending the events again."""
    store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
    agent = Agent("quick", nd.ScriptedModel(["Done."] * 4), version="1")
    tries: dict[str, list[bool]] = {}
    logs = []
    try:
        async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
            records = rt.runtime_store
            update = records.rt_update

            def rt_update(run_id: str, patch: Any, **kwargs: Any) -> Any:
                on_the_loop = store._db.nowait
                if patch.state == "completed":
                    seen = tries.setdefault(run_id, [])
                    seen.append(on_the_loop)
                    if on_the_loop and len(seen) == 1:
                        raise WouldWait  # what a write that meets another process's lock raises
                return update(run_id, patch, **kwargs)

            records.rt_update = rt_update  # type: ignore[method-assign]
            # A few runs: an end is sent to a store thread at once when one holds the
            # store's lock right then (the engine's upkeep scan), which this one is about.
            for _ in range(4):
                run = await rt.submit("quick", "Go.")
                assert (await run.result()).text == "Done."
                logs.append(list(await nd.read_events(store, run.run_id)))
    finally:
        store.close()
    assert [True, False] in tries.values()  # stopped on the loop, finished on a store thread
    for log in logs:
        states = [e.payload["state"] for e in log if e.type == "run_state"]
        assert states.count("completed") == 1
        assert [e.type for e in log].count("run_finished") == 1
        assert log[-1].type == "run_finished"


async def test_a_wait_for_an_active_state_reads_while_the_run_executes_here(
    tmp_path: Path,
) -> None:
    """A wait for ``running`` returns while this process still executes the run
    (it is not made to wait for the execution's end)."""
    store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
    agent = Agent(
        "ask", nd.ScriptedModel([nd.Turn.call("ask")]), [nd.client_tool("ask")], version="1"
    )
    try:
        async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
            run = await rt.submit("ask", "Ask.")
            first = await run.wait("running", "needs_attention", "waiting_approval")
            parked = await run.wait("needs_attention", "waiting_approval", timeout=10)
    finally:
        store.close()
    assert first.state in {"running", "needs_attention", "waiting_approval"}
    assert parked.state in {"needs_attention", "waiting_approval"}
