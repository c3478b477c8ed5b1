"""Viewers see a tool call while the tool runs, not only once it has finished."""

from __future__ import annotations

import asyncio
from typing import Any

import nbdurable as nd


async def test_a_tool_call_event_is_readable_while_the_tool_runs(tmp_path: Any) -> None:
    store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
    started, release = asyncio.Event(), asyncio.Event()

    @nd.tool
    async def slow(to: str) -> str:
        """Takes until the test releases it."""
        started.set()
        await release.wait()
        return "sent"

    task = asyncio.ensure_future(
        nd.generate_text(
            model=nd.ScriptedModel([nd.Turn.call("slow", to="x"), "ok"]),
            messages="go",
            tools=[slow],
            session=nd.DurableSession(store, run_id="r"),
        )
    )
    await asyncio.wait_for(started.wait(), 5)
    types = [e.type for e in store.read_events("r")]
    assert "tool_call" in types and "tool_result" not in types
    release.set()
    assert (await task).text == "ok"
    store.close()
