"""``nbdurable runs approve|deny --as NAME``: the decider is recorded; the agent's approvers hold.

The commands run as real subprocesses that never load the agent: who may
decide is read from the run record (saved at submission).
"""

from __future__ import annotations

import asyncio
import getpass
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from support import cli_agents as test_agents

import nbdurable as nd

ROOT = Path(__file__).resolve().parents[2]


def _park(url: str, run_id: str, **rule: Any) -> None:
    """A janitor run waiting on ``drop_table``, submitted by ``ana``."""

    async def build() -> None:
        store = nd.open_store(url)
        janitor = next(a for a in test_agents.agents() if a.id == "janitor")
        agent = nd.Agent(janitor.id, janitor.model, janitor.tools, version="rule", **rule)
        try:
            async with await nd.DurableRuntime.open(
                store=store, agents=[agent], poll_interval=0.01
            ) as runtime:
                run = await runtime.submit(
                    "janitor", "Clean up stg_2024.", run_id=run_id, submitted_by="ana"
                )
                await run.wait("waiting_approval")
        finally:
            store.close()

    asyncio.run(build())


def _nbdurable(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "NBDURABLE_USER"}
    return subprocess.run(
        [sys.executable, "-m", "nbdurable.cli", *argv],
        env={
            **base,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def _decided(url: str, run_id: str) -> dict[str, Any]:
    store = nd.open_store(url)
    try:
        record = store.rt_get(run_id)  # type: ignore[attr-defined]
        return {key: entry.model_dump(mode="json") for key, entry in record.decided.items()}
    finally:
        store.close()


def test_a_verdict_records_the_os_user_or_the_name_given_with_as(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    _park(url, "run-a")
    _park(url, "run-b")
    done = _nbdurable("runs", "deny", "run-a", "--reason", "not now", "--store", url)
    assert done.returncode == 0, done.stderr
    [entry] = _decided(url, "run-a").values()
    assert entry["source"]["by"] == getpass.getuser()
    assert (
        entry["source"]["via"],
        entry["source"]["authenticated"],
    ) == ("cli", False)
    done = _nbdurable("runs", "approve", "run-b", "--as", "lee", "--store", url)
    assert done.returncode == 0, done.stderr
    [entry] = _decided(url, "run-b").values()
    assert (
        entry["source"]["by"],
        entry["source"]["via"],
    ) == ("lee", "cli")


def test_a_name_the_agent_does_not_allow_exits_5_and_records_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    _park(url, "run-r", approvers={"drop_table": ["ana", "lee"]})
    refused = _nbdurable("runs", "approve", "run-r", "--as", "bob", "--store", url)
    assert refused.returncode == 5 and refused.stdout == ""
    assert refused.stderr.startswith("nbdurable: 'bob' may not decide approval")
    assert "only ana, lee may" in refused.stderr and refused.stderr.count("\n") == 1
    # NBDURABLE_USER is the claimed name when --as is not given
    refused = _nbdurable("runs", "deny", "run-r", "--store", url, env={"NBDURABLE_USER": "eve"})
    assert refused.returncode == 5 and "'eve' may not decide" in refused.stderr
    assert _decided(url, "run-r") == {}
    allowed = _nbdurable("runs", "approve", "run-r", "--store", url, env={"NBDURABLE_USER": "lee"})
    assert allowed.returncode == 0, allowed.stderr
    [entry] = _decided(url, "run-r").values()
    assert (entry["approved"], entry["source"]["by"]) == (True, "lee")


def test_the_submitter_may_not_approve_when_the_agent_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    _park(url, "run-s", submitter_may_approve=False)
    refused = _nbdurable("runs", "approve", "run-s", "--as", "ana", "--store", url)
    assert refused.returncode == 5 and "submitted run 'run-s'" in refused.stderr
    allowed = _nbdurable("runs", "approve", "run-s", "--as", "lee", "--store", url)
    assert allowed.returncode == 0, allowed.stderr
