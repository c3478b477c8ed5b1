"""Approve-vs-deny races between two real processes: one verdict wins, the tool runs iff approved.

Each race parks a run on a gated tool; two racer processes answer the same
approval at the same instant, one approving and one denying (the harness is
tests/support/verdict_race_harness.py; benchmarks/verdict_race.py runs hundreds).
Before verdicts were a conditional write, both were told "recorded" in most races.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.verdict_race_harness import RaceReport, race

RACES = 24


def _holds(report: RaceReport, races: int) -> None:
    shown = "\n".join(report.lines() + report.wrong + report.losers)
    assert report.wrong == [], shown
    assert report.races == races and report.one_winner == races, shown
    assert report.both_recorded == 0 and report.tool_ran_after_denial == 0, shown
    assert report.tool_ran == report.approve_won, shown  # the tool ran iff the approval won
    assert report.loser_named_winner == races, shown  # the loser learned what won


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_approve_and_deny_from_two_processes_record_exactly_one(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        str(request.getfixturevalue("pg_database"))
        if kind == "postgres"
        else f"sqlite:///{tmp_path / 'runs.db'}"
    )
    report = await race(url, tmp_path / "tools.log", races=RACES)
    _holds(report, RACES)


async def test_card_verdicts_from_two_processes_record_exactly_one(tmp_path: Path) -> None:
    # submit_verdict: the path of a widget card and of the HTTP bridge, token checked
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    report = await race(url, tmp_path / "tools.log", races=12, api="submit")
    _holds(report, 12)
