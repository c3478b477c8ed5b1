"""`nbdurable store prune`: finished runs go, unfinished ones stay; --dry-run lists only."""

from __future__ import annotations

import argparse
import json

import pytest

import nbdurable as nd
from nbdurable.cli import main
from nbdurable.cli._store_prune import cutoff_ms, parse_age


def _ids(url: str) -> set[str]:
    store = nd.open_store(url)
    try:
        return set(store.list()) | {run.run_id for run in store.rt_list()}
    finally:
        store.close()


def test_dry_run_then_prune(runs_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    before = _ids(runs_store)
    assert main(["store", "prune", runs_store, "--older-than", "0s", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "  run-done  completed  finished " in out
    assert "  run-flaky  failed  finished " in out
    for unfinished in ("run-wait", "run-pair", "run-loop"):  # waiting, or a suspended loop
        assert unfinished not in out
    assert "Would delete 2 run(s) finished before " in out
    assert _ids(runs_store) == before

    assert main(["store", "prune", runs_store, "--older-than", "0s", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert not report["dry_run"] and report["reclaimed"].startswith("VACUUM: ")
    assert {run["run_id"] for run in report["runs"]} == {"run-done", "run-flaky"}
    assert _ids(runs_store) == before - {"run-done", "run-flaky"}

    # a date before every run: nothing goes
    assert main(["store", "prune", runs_store, "--finished-before", "2000-01-01"]) == 0
    assert "Deleted 0 run(s) finished before 2000-01-01 00:00:00Z." in capsys.readouterr().out


def test_nbdurable_store_names_the_store(
    runs_store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NBDURABLE_STORE", runs_store)
    assert main(["store", "prune", "--older-than", "1d", "--dry-run"]) == 0
    assert "Would delete 0 run(s)" in capsys.readouterr().out  # the runs are minutes old


def test_ages_and_dates() -> None:
    assert parse_age("30d") == 30 * 86_400 and parse_age("12h") == 43_200
    assert parse_age("2w") == 14 * 86_400 and parse_age("1.5m") == 90
    args = argparse.Namespace(finished_before=None, older_than="1d")
    assert cutoff_ms(args, now=200_000.0) == (200_000 - 86_400) * 1000
    args = argparse.Namespace(finished_before="2026-01-31T12:00+01:00", older_than=None)
    assert cutoff_ms(args) == 1_769_857_200_000


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--older-than", "30 days"], "--older-than '30 days': give a number and a unit"),
        (["--finished-before", "last tuesday"], "--finished-before 'last tuesday': give an ISO"),
    ],
)
def test_bad_ages_and_dates_are_one_line(
    runs_store: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["store", "prune", runs_store, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nbdurable: ") and message in err, err
    assert "run-done" in _ids(runs_store)
