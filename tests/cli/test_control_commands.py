"""``nbdurable runs approve|deny|resume|cancel|retry`` through DurableRuntime, on real runs."""

from __future__ import annotations

import json

import pytest
from support import cli_agents as test_agents

from .conftest import AGENTS, fits, state


def _approval_ids(cli, url: str, run_id: str) -> list[str]:
    _, out, _ = cli("runs", "show", run_id, "--json", "--store", url)
    return [a["approval_id"] for a in json.loads(out)["approvals"] if not a["answered"]]


def test_approve_the_only_approval_then_resume_it_elsewhere(cli, runs_store: str) -> None:
    status, out, err = cli("runs", "approve", "run-wait", "--store", runs_store)
    assert status == 0 and err == ""
    assert out.startswith("approved drop_table(name='stg_2024') (approval_")
    assert "run-wait: pending" in out
    assert state(runs_store, "run-wait") == "pending"  # no runtime here: it waits for one
    status, out, _ = cli("runs", "resume", "run-wait", "--agents", AGENTS, "--store", runs_store)
    assert status == 0 and fits(out)
    assert "✓ approved" in out and "← drop_table: dropped stg_2024" in out
    assert out.rstrip().endswith("run-wait: completed\nDone: dropped stg_2024.")
    assert state(runs_store, "run-wait") == "completed"


def test_approve_with_agents_executes_the_run_and_streams_its_text(cli, runs_store) -> None:
    status, out, _ = cli("runs", "approve", "run-wait", "--agents", AGENTS, "--store", runs_store)
    assert status == 0 and fits(out)
    lines = out.splitlines()
    assert "  Done: dropped stg_2024." in lines  # the model's streamed text
    assert lines[-2:] == ["run-wait: completed", "Done: dropped stg_2024."]


def test_deny_with_a_reason_the_model_reacts(cli, runs_store: str) -> None:
    status, out, _ = cli(
        "runs", "deny", "run-wait", "--reason", "not today", "--agents", AGENTS,
        "--store", runs_store,
    )  # fmt: skip
    assert status == 0
    assert out.startswith("denied drop_table(name='stg_2024')")
    assert "✗ drop_table: not today" in out
    assert out.rstrip().endswith("Kept it: not today")


def test_several_pending_approvals_need_an_id(cli, runs_store: str) -> None:
    first, second = _approval_ids(cli, runs_store, "run-pair")
    status, out, err = cli("runs", "approve", "run-pair", "--store", runs_store)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "waits for 2 approvals" in err and first in err and second in err
    status, out, _ = cli("runs", "approve", "run-pair", first, "--store", runs_store)
    assert status == 0 and "drop_table(name='a')" in out
    assert "run-pair: waiting_approval" in out and second in out  # the other one still waits
    assert _approval_ids(cli, runs_store, "run-pair") == [second]
    status, out, _ = cli(
        "runs", "deny", "run-pair", "--agents", AGENTS, "--store", runs_store
    )  # the one left: no id needed
    assert status == 0 and "denied drop_table(name='b')" in out
    assert out.rstrip().endswith("run-pair: completed\nBoth handled.")


def test_an_unknown_approval_id_lists_the_pending_ones(cli, runs_store: str) -> None:
    [pending] = _approval_ids(cli, runs_store, "run-wait")
    status, _, err = cli("runs", "approve", "run-wait", "approval_nope", "--store", runs_store)
    assert status == 2 and "approval_nope" in err and pending in err and err.count("\n") == 1


def test_approving_a_run_that_waits_for_nothing_is_an_error(cli, runs_store: str) -> None:
    status, _, err = cli("runs", "approve", "run-done", "--store", runs_store)
    assert (
        status == 2 and err == "nbdurable: run 'run-done' waits for no approval (it is completed)\n"
    )


def test_resume_a_run_that_waits_prints_what_it_waits_for(cli, runs_store: str) -> None:
    status, out, _ = cli("runs", "resume", "run-wait", "--agents", AGENTS, "--store", runs_store)
    assert status == 0
    assert out.splitlines()[0] == "run-wait: waiting_approval"
    assert "drop_table(name='stg_2024')" in out and "nbdurable runs approve run-wait" in out


def test_resume_a_loop_run_says_how_to_resume_it(cli, runs_store: str) -> None:
    status, out, err = cli("runs", "resume", "run-loop", "--agents", AGENTS, "--store", runs_store)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "no runtime record" in err and "resume_from_checkpoint" in err
    status, _, err = cli("runs", "approve", "run-loop", "--store", runs_store)
    assert status == 2 and "resume_from_checkpoint" in err


def test_resume_with_agents_that_do_not_serve_the_run(cli, runs_store: str) -> None:
    status, _, err = cli(
        "runs",
        "resume",
        "run-wait",
        "--agents",
        "support.cli_agents:helper_only",
        "--store",
        runs_store,
    )
    assert status == 2 and "'janitor'" in err and "helper v1" in err


def test_resume_needs_agents(cli, runs_store: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli("runs", "resume", "run-wait", "--store", runs_store)
    assert exc.value.code == 2
    assert "--agents" in capsys.readouterr().err


def test_cancel_a_waiting_run(cli, runs_store: str) -> None:
    status, out, _ = cli("runs", "cancel", "run-wait", "--store", runs_store)
    assert (status, out.splitlines()[0]) == (0, "run-wait: cancelled (cancelled)")
    assert state(runs_store, "run-wait") == "cancelled"
    _, listed, _ = cli("runs", "list", "--status", "cancelled", "--store", runs_store)
    assert "run-wait" in listed


def test_retry_a_failed_run(cli, runs_store: str) -> None:
    status, out, _ = cli("runs", "show", "run-flaky", "--store", runs_store)
    assert "the model is down" in out
    status, out, _ = cli("runs", "retry", "run-flaky", "--store", runs_store)
    assert (status, out.splitlines()[0]) == (0, "run-flaky: pending")
    test_agents.FLAKY["fail"] = False
    status, out, _ = cli("runs", "resume", "run-flaky", "--agents", AGENTS, "--store", runs_store)
    assert status == 0 and out.rstrip().endswith("run-flaky: completed\nBack up.")


def test_retry_with_agents_executes_and_a_failure_exits_1(cli, runs_store: str) -> None:
    status, out, _ = cli("runs", "retry", "run-flaky", "--agents", AGENTS, "--store", runs_store)
    assert status == 1 and "run-flaky: failed" in out and "the model is down" in out
    assert "nbdurable runs retry run-flaky" in out
    status, _, err = cli("runs", "retry", "run-done", "--store", runs_store)
    assert status == 2 and "only failed or needs_attention runs retry" in err


def test_steering_an_unknown_run_is_one_line_and_status_2(cli, runs_store: str) -> None:
    for argv in (
        ["approve", "run-nope"],
        ["deny", "run-nope"],
        ["cancel", "run-nope"],
        ["retry", "run-nope"],
        ["resume", "run-nope", "--agents", AGENTS],
        ["rewind", "run-nope", "0"],
    ):
        status, out, err = cli("runs", *argv, "--store", runs_store)
        assert status == 2 and out == "", argv
        assert err.startswith("nbdurable: ") and err.count("\n") == 1 and "run-nope" in err, argv
        assert "Traceback" not in err


def test_bad_arguments_are_one_line_and_status_2(cli, runs_store: str) -> None:
    cases = {
        ("rewind", "run-done", "9"): "9",
        ("rewind", "run-wait", "0", "--edit-tool-result", "x"): "not a tool result",
        ("approve", "run-wait", "--agents", "nope_module:agents"): "nope_module",
        ("approve", "run-wait", "--agents", "support.cli_agents"): "module:attribute",
        ("list", "--store", "bogus"): "bogus",
    }
    for argv, needle in cases.items():
        store = () if "--store" in argv else ("--store", runs_store)
        status, out, err = cli("runs", *argv, *store)
        assert status == 2 and out == "", argv
        assert err.startswith("nbdurable: ") and err.count("\n") == 1 and needle in err, (argv, err)
