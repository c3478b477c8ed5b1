"""Which runs a claim may take: the definition a run was submitted with, and its engine.

The rules in the store (every store); with real worker processes on each engine
(a run of an unserved version waits, a worker leaves another engine's run alone):
tests/engines/test_versions.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support.records import pending_run
from support.versioned_agents import steps_v1

import nbdurable as nd
from nbdurable.runs import RuntimeRun, claimable, unclaimable_by_definition
from nbdurable.runtime import DurableRuntime

V1 = "support.versioned_agents:steps_v1"
NOW = 1_800_000_000_000


def _record(run_id: str, **fields: object) -> RuntimeRun:
    return pending_run(run_id, at=NOW, agent_id="steps", prompt='"go"', **fields)


def test_claims_take_runs_of_the_embedded_engine_and_old_records_only() -> None:
    served = [("steps", "1")]
    assert claimable(_record("a", engine="embedded"), NOW, served)
    assert claimable(_record("old"), NOW, served)  # recorded before engines were
    assert not claimable(_record("t", engine="temporal"), NOW, served)
    # a Temporal run is none of an embedded runtime's business: no waiting reason either
    assert unclaimable_by_definition(_record("t", engine="temporal"), NOW, [("x", "1")]) is None


def test_every_store_leaves_a_temporal_run_to_temporal(store: Any) -> None:
    store.rt_insert(_record("t", engine="temporal"), enqueue=False, max_pending=10)
    assert store.rt_claim("w", NOW, 1000, [("steps", "1")]) is None
    assert store.rt_get("t").waiting_reason is None
    store.rt_insert(_record("e", engine="embedded"), enqueue=False, max_pending=10)
    taken = store.rt_claim("w", NOW, 1000, [("steps", "1")])
    assert taken is not None and taken.run_id == "e"


def test_runs_move_hands_a_temporal_run_to_the_embedded_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("temporalio", reason="the temporal extra is not installed")
    from nbdurable.cli import main
    from nbdurable.temporal import TemporalEngine

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store: Any = nd.open_store(url)

    async def submit() -> None:
        client = DurableRuntime(store=store, agents=steps_v1, engine=TemporalEngine())
        await client.submit("steps", "Go.", run_id="run-t")

    async def execute() -> str:
        async with DurableRuntime(store=store, agents=steps_v1, poll_interval=0.02) as here:
            result = await asyncio.wait_for((await here.get_run("run-t")).result(), 30)
        return result.text

    try:
        asyncio.run(submit())
        # executing it here is refused while it is Temporal's
        assert main(["runs", "resume", "run-t", "--store", url, "--agents", V1]) != 0
        assert "temporal engine" in capsys.readouterr().err
        assert store.rt_get("run-t").state == "pending"

        assert main(["runs", "move", "run-t", "--engine", "embedded", "--store", url]) == 0
        assert "moved to the embedded engine" in capsys.readouterr().out
        assert store.rt_get("run-t").engine == "embedded"
        assert asyncio.run(execute()) == "steps v1 answered."
        # a finished run stays where it ran
        assert main(["runs", "move", "run-t", "--engine", "temporal", "--store", url]) == 1
        assert "not moved, it is completed" in capsys.readouterr().err
        assert store.rt_get("run-t").engine == "embedded"
    finally:
        store.close()
