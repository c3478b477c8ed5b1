"""Every engine: standing approvals (grants), approve-vs-deny races and notifications.

A grant made while a run waits settles the waiting call and covers the later
ones; two processes answering one approval at the same instant record exactly
one verdict (the store's write is the one arbiter) and the gated tool runs iff
the approval won; with two workers, the one that writes the waiting state posts
the signed notification, once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from support.executions import tool_counts
from support.notify_receiver import receiver
from support.verdict_race_harness import race

from .conftest import EngineCase

RACES = 6
SECRET = "engine notify secret"


async def test_a_grant_covers_the_waiting_call_and_the_later_ones(engine: EngineCase) -> None:
    engine.worker()
    store = engine.store
    async with engine.client() as rt:
        run = await rt.submit("warden", "Drop the staging tables.")
        await asyncio.wait_for(run.wait("waiting_approval"), 30)
        [request] = await run.pending_approvals()
        assert request.input == {"name": "stg_1"}
        grant = await run.grant("drop_table", minutes=30, match={"name": "stg_*"}, by="ana")
        result = await asyncio.wait_for(run.result(), 60)
    assert result.text == "Dropped three staging tables."
    counts = tool_counts(engine.tools)
    assert len(counts) == 3 and set(counts.values()) == {1}
    events = list(store.read_events(run.run_id))
    requests = [e for e in events if e.type == "tool_approval_request"]
    assert len(requests) == 1  # only the call made before the grant
    resolved = [e.payload for e in events if e.type == "approval_resolved"]
    assert len(resolved) == 3
    assert {p["source"]["grant_id"] for p in resolved} == {grant.grant_id}
    assert {p["source"]["via"] for p in resolved} == {"grant"}
    assert {p["source"]["by"] for p in resolved} == {"ana"}
    states = [e.payload["state"] for e in events if e.type == "run_state"]
    assert states.count("waiting_approval") == 1


def _drops(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT run_id, call_id FROM runs WHERE tool = 'drop_table'").fetchall()
    finally:
        db.close()
    return [f"{run_id}/{call_id}" for run_id, call_id in rows]


async def test_approve_and_deny_racing_record_exactly_one(engine: EngineCase) -> None:
    engine.worker()

    def ran(run_id: str) -> bool:
        return any(key.startswith(f"{run_id}/") for key in _drops(engine.tools))

    async with engine.client() as rt:
        report = await race(
            engine.url,
            engine.tools.parent / "unused.log",
            races=RACES,
            runtime=rt,
            agent="janitor",
            ran=ran,
        )
    shown = "\n".join(report.lines() + report.wrong + report.losers)
    assert report.wrong == [] and report.one_winner == RACES, shown
    assert report.tool_ran == report.approve_won and report.loser_named_winner == RACES, shown
    counts = tool_counts(engine.tools)
    assert set(counts.values()) == {1}  # no tool call ran twice


async def test_two_workers_post_one_message_per_approval(engine: EngineCase) -> None:
    with receiver() as hook:
        for _ in range(2):
            engine.worker(
                args=["--notify-url", hook.url, "--public-url", "https://bridge.example"],
                NBDURABLE_NOTIFY_SECRET=SECRET,
            )
        async with engine.client() as rt:
            run = await rt.submit("janitor", "Clean up stale staging tables.")
            await asyncio.wait_for(run.wait("waiting_approval"), 60)
            (request,) = await run.pending_approvals()
            for _ in range(600):
                if hook.delivered():
                    break
                await asyncio.sleep(0.05)
            [message] = hook.delivered()
            assert message.genuine(SECRET)
            payload = message.payload
            assert payload["run_id"] == run.run_id
            assert payload["approval_id"] == request.approval_id
            assert payload["tool"] == "drop_table"
            assert payload["link"].startswith(f"https://bridge.example/approve/{run.run_id}/")
            await run.approve()
            result = await asyncio.wait_for(run.result(), 60)
            assert result.text == "Done: dropped stg_2023."
        await asyncio.sleep(1.0)  # a late duplicate would have arrived by now
        assert len(hook.all()) == 1
