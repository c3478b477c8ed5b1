"""``nbdurable runs approve|deny``: a verdict that lost (exit 3) and a token past the max age (exit 4)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import cli_agents as test_agents

import nbdurable as nd

from .conftest import AGENTS, state

ROOT = Path(__file__).resolve().parents[2]


class _Epoch:
    """A clock stuck at the epoch: tokens signed by it say ``issued_at=0``."""

    def now(self) -> int:
        return 0


def test_a_verdict_that_lost_is_one_line_and_exit_3(cli, runs_store: str) -> None:
    status, out, _ = cli("runs", "approve", "run-wait", "--store", runs_store)
    assert status == 0
    approval_id = out.splitlines()[0].split("(")[-1].rstrip(")")
    status, out, err = cli("runs", "deny", "run-wait", approval_id, "--store", runs_store)
    assert status == 3 and out == ""
    assert err == (f"nbdurable: approval {approval_id!r} of run 'run-wait' was already approved\n")
    status, _, err = cli("runs", "deny", "run-wait", "--store", runs_store)  # no id: the latest
    assert status == 3 and "was already approved" in err and err.count("\n") == 1
    assert state(runs_store, "run-wait") == "pending"


def _park_with_an_old_token(url: str, key: Path) -> None:
    async def build() -> None:
        store = nd.open_store(url)
        signer = nd.ApprovalSigner.from_file(key, clock=_Epoch())  # the store's own secret
        try:
            async with await nd.DurableRuntime.open(
                store=store, agents=test_agents.agents(), approval_signer=signer, poll_interval=0.01
            ) as runtime:
                run = await runtime.submit("janitor", "Clean up stg_2024.", run_id="run-old")
                await run.wait("waiting_approval")
        finally:
            store.close()

    asyncio.run(build())


def test_a_token_past_the_max_age_is_refused_then_approved_fresh(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NBDURABLE_APPROVAL_SECRET", raising=False)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    _park_with_an_old_token(url, tmp_path / "approval.key")
    status, out, err = cli("runs", "approve", "run-old", "--store", url)
    assert status == 4 and out == "" and err.count("\n") == 1
    assert "expired" in err and "the request still waits" in err
    assert "drop_table(name='stg_2024')" in err  # shown again
    assert "nbdurable runs approve run-old approval_" in err and "--fresh" in err
    store = nd.open_store(url)
    record = store.rt_get("run-old")  # type: ignore[attr-defined]
    store.close()
    assert record.state == "waiting_approval" and record.verdicts == {} == record.decided
    status, out, _ = cli(
        "runs", "approve", "run-old", "--fresh", "--agents", AGENTS, "--store", url
    )
    assert status == 0, out
    assert out.rstrip().endswith("run-old: completed\nDone: dropped stg_2024.")


def _command(verb: str, url: str, approval_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "nbdurable.cli", "runs", verb, "run-x", approval_id, "--store", url],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_approve_and_deny_commands_racing_record_one_verdict(tmp_path: Path) -> None:
    for i in range(3):
        url = f"sqlite:///{tmp_path / f'race{i}.db'}"

        async def park(url: str = url) -> str:
            store = nd.open_store(url)
            try:
                async with await nd.DurableRuntime.open(
                    store=store, agents=test_agents.agents(), poll_interval=0.01
                ) as runtime:
                    run = await runtime.submit("janitor", "Clean up.", run_id="run-x")
                    await run.wait("waiting_approval")
                    return (await run.pending_approvals())[0].approval_id
            finally:
                store.close()

        approval_id = asyncio.run(park())
        racers = {verb: _command(verb, url, approval_id) for verb in ("approve", "deny")}
        done = {verb: (p.wait(60), p.stdout.read(), p.stderr.read()) for verb, p in racers.items()}  # type: ignore[union-attr]
        statuses = sorted(status for status, _, _ in done.values())
        assert statuses == [0, 3], done
        winner = "approved" if done["approve"][0] == 0 else "denied"
        loser = "deny" if winner == "approved" else "approve"
        assert f"was already {winner}" in done[loser][2]
        store = nd.open_store(url)
        record = store.rt_get("run-x")  # type: ignore[attr-defined]
        store.close()
        assert record.decided[approval_id].approved == (winner == "approved")
