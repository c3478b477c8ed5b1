"""``nbdurable runs approvals``: what waits for a verdict across every run of a store."""

from __future__ import annotations

import json

from .conftest import fits


def test_the_pending_approvals_of_every_run_in_a_table(cli, runs_store: str) -> None:
    status, out, err = cli("runs", "approvals", "--store", runs_store)
    assert status == 0 and err == "" and fits(out)
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["run", "approval", "status", "call"]
    runs = [line.split()[0] for line in lines[1:]]
    assert sorted(runs) == ["run-loop", "run-pair", "run-pair", "run-wait"]
    wait = next(line for line in lines if line.startswith("run-wait"))
    assert "pending" in wait and 'drop_table(name="stg_2024")' in wait


def test_decided_ones_show_with_all_and_json_gives_every_field(cli, runs_store: str) -> None:
    status, out, _ = cli("runs", "deny", "run-wait", "--reason", "keep it", "--store", runs_store)
    assert status == 0
    _, out, _ = cli("runs", "approvals", "--store", runs_store)
    assert "run-wait" not in out
    _, out, _ = cli("runs", "approvals", "--all", "--run", "run-wait", "--store", runs_store)
    (row,) = out.splitlines()[1:]
    assert "denied" in row and "keep it" in row
    status, out, _ = cli("runs", "approvals", "--all", "--json", "--store", runs_store)
    rows = json.loads(out)
    assert status == 0 and len(rows) == 4
    denied = next(r for r in rows if r["run_id"] == "run-wait")
    assert denied["status"] == "denied" and denied["reason"] == "keep it"
    assert denied["arguments"] == {"name": "stg_2024"} and denied["agent_path"] == []
    assert denied["requested_at"].endswith("Z") and denied["decided_at"].endswith("Z")
    assert isinstance(denied["waited"], int)
    _, out, _ = cli("runs", "approvals", "--json", "--run", "run-pair", "--store", runs_store)
    assert [r["status"] for r in json.loads(out)] == ["pending", "pending"]


def test_an_empty_inbox_and_an_unknown_run(cli, runs_store: str) -> None:
    _, out, _ = cli("runs", "approvals", "--run", "run-done", "--store", runs_store)
    assert out == f"no pending approvals in run run-done ({runs_store})\n"
    status, _, err = cli("runs", "approvals", "--run", "nope", "--store", runs_store)
    assert status == 2 and err.startswith("nbdurable: ") and "nope" in err
