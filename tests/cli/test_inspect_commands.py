"""``nbdurable runs list|show|history|explain|rewind`` on a store of real runs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

import nbdurable as nd

from .conftest import AGENTS, fits, state


def test_list_shows_every_run_with_its_state_in_100_columns(cli, runs_store: str) -> None:
    status, out, err = cli("runs", "list", "--store", runs_store)
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["run", "agent", "status"]
    assert "pending" in lines[0]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"run-done", "run-wait", "run-pair", "run-flaky", "run-loop"}
    assert "completed" in rows["run-done"] and "helper" in rows["run-done"]
    assert "waiting_approval" in rows["run-pair"] and rows["run-pair"].rstrip().endswith("2")
    assert "failed" in rows["run-flaky"] and "suspended" in rows["run-loop"]
    assert fits(out)


def test_runs_without_an_action_lists_and_store_goes_before_or_after(cli, runs_store: str) -> None:
    def listing(*argv: str) -> tuple[int, str, str]:
        status, out, err = cli(*argv)
        # the age column reads the wall clock: a second may tick between two listings
        return status, re.sub(r"\b\d+[smhd]\b", "AGE", out), err

    _, listed, _ = listing("runs", "list", "--store", runs_store)
    assert "AGE" in listed
    assert listing("runs", "--store", runs_store) == (0, listed, "")
    assert listing("runs", "--store", runs_store, "list") == (0, listed, "")


def test_list_filters_by_status_and_prints_json(cli, runs_store: str) -> None:
    _, out, _ = cli("runs", "list", "--status", "waiting_approval", "--store", runs_store)
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["run-wait", "run-pair"]
    status, out, _ = cli("runs", "list", "--json", "--store", runs_store)
    rows = json.loads(out)
    assert status == 0 and {r["run_id"] for r in rows} >= {"run-done", "run-loop"}
    done = next(r for r in rows if r["run_id"] == "run-done")
    assert done["status"] == "completed" and done["agent"] == "helper" and done["steps"] == 2
    _, out, _ = cli("runs", "--json", "--status", "failed", "--store", runs_store)  # old flag
    assert [r["run_id"] for r in json.loads(out)] == ["run-flaky"]


def test_list_of_an_empty_store_says_which_store(cli, tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    nd.open_store(url).close()  # type: ignore[attr-defined]
    assert cli("runs", "--store", url) == (0, f"no runs in {url}\n", "")


def test_list_fits_a_narrow_terminal(cli, runs_store: str, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    _, out, _ = cli("runs", "list", "--store", runs_store)
    assert fits(out, 60) and "run-flaky" in out and "waiting_approval" in out


def test_show_prints_the_summary_and_the_latest_messages(cli, runs_store: str) -> None:
    status, out, _ = cli("runs", "show", "run-done", "--store", runs_store)
    assert status == 0 and fits(out)
    assert "status       completed" in out and "helper" in out
    table = out.split("\n\n", 1)[1].splitlines()
    assert table[0].split() == ["#", "role", "parts", "text", "tool", "result"]
    assert [line.split()[1] for line in table[1:]] == ["user", "assistant", "tool", "assistant"]
    assert "lookup" in table[2] and "answer = 42" in table[3] and "It is 42." in table[4]


def test_show_lists_pending_approvals_with_their_ids(cli, runs_store: str) -> None:
    _, out, _ = cli("runs", "show", "run-pair", "--store", runs_store)
    approvals = [line for line in out.splitlines() if line.startswith("approval")]
    assert len(approvals) == 2
    assert "drop_table(name='a')" in approvals[0] and "drop_table(name='b')" in approvals[1]
    _, out, _ = cli("runs", "show", "run-pair", "--json", "--store", runs_store)
    data = json.loads(out)
    assert data["run"]["run_id"] == "run-pair" and data["run"]["status"] == "waiting_approval"
    assert [a["input"] for a in data["approvals"]] == [{"name": "a"}, {"name": "b"}]
    assert [m["role"] for m in data["messages"]] == ["user", "assistant"]


def test_show_a_failed_run_gives_its_error(cli, runs_store: str) -> None:
    _, out, _ = cli("runs", "show", "run-flaky", "--store", runs_store)
    assert "failed" in out and "the model is down" in out


def test_history_has_one_row_per_checkpoint(cli, runs_store: str) -> None:
    status, out, _ = cli("runs", "history", "run-done", "--store", runs_store)
    lines = out.splitlines()
    assert status == 0 and fits(out)
    assert lines[0].split()[:5] == ["step", "status", "finish", "msgs", "new"]
    assert [line.split()[:2] for line in lines[1:]] == [["0", "running"], ["1", "completed"]]
    assert "lookup" in lines[1]
    _, out, _ = cli("runs", "history", "run-wait", "--json", "--store", runs_store)
    [row] = json.loads(out)
    assert row["step"] == 0 and row["status"] == "suspended" and row["pending_approvals"] == 1
    assert row["tool_calls"] == "drop_table"


def test_explain_says_what_the_run_waits_for(cli, runs_store: str) -> None:
    status, out, _ = cli("runs", "explain", "run-wait", "--store", runs_store)
    assert status == 0 and "run-wait" in out and "drop_table" in out
    assert "nbdurable runs approve run-wait" in out and "await " not in out  # terminal steps
    _, out, _ = cli("runs", "explain", "run-wait", "--json", "--store", runs_store)
    assert isinstance(json.loads(out), dict)


def test_rewind_forks_and_prints_the_new_run_id(cli, runs_store: str) -> None:
    status, out, _ = cli("runs", "rewind", "run-done", "0", "--store", runs_store)
    fork = out.strip()
    assert status == 0 and fork and fork != "run-done" and "\n" not in fork
    _, listed, _ = cli("runs", "list", "--store", runs_store)
    assert any(line.startswith(fork) and "run-done@0" in line for line in listed.splitlines())


def test_rewind_with_an_edited_user_message_then_resume_the_fork(cli, runs_store: str) -> None:
    status, out, _ = cli(
        "runs", "rewind", "run-wait", "0", "--run-id", "fork-user",
        "--edit-user", "Leave stg_2024 alone.", "--store", runs_store,
    )  # fmt: skip
    assert (status, out) == (0, "fork-user\n")
    _, shown, _ = cli("runs", "show", "fork-user", "--store", runs_store)
    assert "Leave stg_2024 alone." in shown and "run-wait@0" in shown


def test_rewind_with_an_edited_tool_result(cli, runs_store: str) -> None:
    status, out, _ = cli(
        "runs", "rewind", "run-done", "0", "--run-id", "fork-tool",
        "--edit-tool-result", "answer = 7", "--store", runs_store,
    )  # fmt: skip
    assert (status, out) == (0, "fork-tool\n")
    _, shown, _ = cli("runs", "show", "fork-tool", "--json", "--store", runs_store)
    messages = json.loads(shown)["messages"]
    assert messages[-1]["role"] == "tool" and "answer = 7" in messages[-1]["tool_result"]
    status, out, _ = cli("runs", "resume", "fork-tool", "--agents", AGENTS, "--store", runs_store)
    assert status == 0 and "fork-tool: completed" in out and "It is 42." in out
    assert state(runs_store, "fork-tool") == "completed"


def test_the_console_script_and_python_m_both_run(runs_store: str) -> None:
    script = shutil.which("nbdurable")
    commands = [[sys.executable, "-m", "nbdurable.cli"]] + ([[script]] if script else [])
    for command in commands:
        done = subprocess.run(
            [*command, "runs", "list", "--store", runs_store],
            capture_output=True,
            text=True,
            env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "run-done" in done.stdout and fits(done.stdout)


@pytest.mark.parametrize("action", ["show", "history", "explain"])
def test_inspecting_an_unknown_run_is_one_line_and_status_2(cli, runs_store, action) -> None:
    status, out, err = cli("runs", action, "run-nope", "--store", runs_store)
    assert status == 2 and out == ""
    assert err.startswith("nbdurable: ") and err.count("\n") == 1 and "run-nope" in err
