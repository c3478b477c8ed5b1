"""Edit-vs-deny and edit-vs-reply races between two real processes: exactly one verdict wins.

As in test_verdict_races.py (the harness is tests/support/verdict_race_harness.py),
two racer processes answer the same approval at the same instant: one approves
with edited arguments, the other denies or replies in place of the tool. Exactly
one is recorded, the loser is told which (``approved`` / ``denied`` /
``replied``), the tool runs iff the edit won, and then with the edited arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.verdict_race_harness import EDITED_TABLE, RaceReport, race, ran_with

RACES = 12


def _holds(report: RaceReport, races: int, log: Path) -> None:
    shown = "\n".join(report.lines() + report.wrong + report.losers)
    assert report.wrong == [], shown
    assert report.races == races and report.one_winner == races, shown
    assert report.both_recorded == 0 and report.tool_ran_after_denial == 0, shown
    assert report.tool_ran == report.approve_won, shown  # the tool ran iff the edit won
    assert report.loser_named_winner == races, shown  # the loser learned what won
    assert set(ran_with(log).values()) <= {EDITED_TABLE}, ran_with(log)  # and ran as edited


@pytest.mark.parametrize(
    ("verbs", "api"), [(("edit", "deny"), "run"), (("edit", "reply"), "submit")]
)
async def test_an_edit_and_a_denial_or_reply_from_two_processes_record_exactly_one(
    verbs: tuple[str, str], api: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "tools.log"
    report = await race(url, log, races=RACES, api=api, verbs=verbs)
    _holds(report, RACES, log)
