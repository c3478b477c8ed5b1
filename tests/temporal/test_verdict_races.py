"""Approve-vs-deny races on the Temporal engine: the store's verdict write is the one arbiter.

Two racer processes answer each approval at the same instant; the client
runtime's dispatcher signals the workflow with the store's record, and the
workflow takes the store's verdicts over any signal's. Exactly one verdict
wins, and the worker executes the gated tool iff the approval won.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.executions import tool_counts
from support.verdict_race_harness import race

from .conftest import Cluster

RACES = 6


async def test_approve_and_deny_racing_on_temporal_record_exactly_one(cluster: Cluster) -> None:
    cluster.worker()

    def ran(run_id: str) -> bool:
        return any(key.startswith(f"{run_id}/") for key in _drops(cluster.tools))

    async with cluster.runtime(heartbeat_timeout=2) as rt:
        report = await race(
            cluster.url,
            cluster.tools.parent / "unused.log",
            races=RACES,
            runtime=rt,
            agent="janitor",
            ran=ran,
        )
    shown = "\n".join(report.lines() + report.wrong + report.losers)
    assert report.wrong == [] and report.one_winner == RACES, shown
    assert report.tool_ran == report.approve_won and report.loser_named_winner == RACES, shown
    counts = tool_counts(cluster.tools)
    assert set(counts.values()) == {1}  # no tool call ran twice


def _drops(path: Path) -> list[str]:
    import sqlite3

    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT run_id, call_id FROM runs WHERE tool = 'drop_table'").fetchall()
    finally:
        db.close()
    return [f"{run_id}/{call_id}" for run_id, call_id in rows]
