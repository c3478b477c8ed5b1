"""Workers serve agent versions, and runs belong to the engine they were submitted to.

Real `nbdurable worker` processes on one SQLite store: a run of a version no
worker serves stays pending with its waiting reason (in the record, ``explain``
and ``nbdurable runs list``) until a worker serving it starts; an embedded
worker leaves a Temporal client's run alone and says so once in its log.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.runtime_harness import worker
from support.versioned_agents import steps_v1

import nbdurable as nd
from nbdurable.runs import RuntimeRun, claimable, unclaimable_by_definition
from nbdurable.runtime import DurableRuntime

from .conftest import eventually

REASON = "waits for a worker serving steps v1"
V1 = "support.versioned_agents:steps_v1"
V2 = "support.versioned_agents:steps_v2"
NOW = 1_800_000_000_000


def _stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM by PID; the worker's log (stderr)."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    return err


async def test_a_run_of_an_unserved_version_waits_for_a_worker_serving_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store: Any = nd.open_store(url)
    v2 = worker(url, None, agents=V2)
    v1: subprocess.Popen[str] | None = None
    try:
        client = DurableRuntime(store=store, agents=steps_v1)  # submits only
        run = await client.submit("steps", "Go.", run_id="run-v1")
        await eventually(lambda: store.rt_get("run-v1").waiting_reason == REASON, 30)
        await asyncio.sleep(1.0)  # the v2 worker polls every 20 ms: dozens of chances
        record = store.rt_get("run-v1")
        assert record.state == "pending" and record.fence == 0 and record.lease_owner is None
        assert record.engine == "embedded" and store.load("run-v1") is None
        assert REASON in str(nd.inspect.explain(store, "run-v1"))
        assert nd.inspect.runs(store, all_columns=True).loc["run-v1", "waiting_reason"] == REASON
        from nbdurable.cli import main

        assert main(["runs", "list", "--store", url]) == 0
        assert REASON in " ".join(capsys.readouterr().out.split())

        v1 = worker(url, None, agents=V1)
        await eventually(lambda: store.rt_get("run-v1").state == "completed", 60)
        done = store.rt_get("run-v1")
        assert done.waiting_reason is None and done.fence == 1  # claimed once, by v1
        assert (await run.result()).text == "steps v1 answered."
    finally:
        if v1 is not None:
            _stop(v1)
        _stop(v2)
        store.close()


async def test_an_embedded_worker_leaves_a_temporal_run_alone(tmp_path: Path) -> None:
    pytest.importorskip("temporalio", reason="the temporal extra is not installed")
    from nbdurable.temporal import TemporalEngine

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store: Any = nd.open_store(url)
    try:
        # a Temporal client's submission (no server needed: the runtime is never opened)
        client = DurableRuntime(store=store, agents=steps_v1, engine=TemporalEngine())
        await client.submit("steps", "Go.", run_id="run-t")
        embedded = DurableRuntime(store=store, agents=steps_v1)
        await embedded.submit("steps", "Go.", run_id="run-e")
        proc = worker(url, None, agents=V1)
        try:
            await eventually(lambda: store.rt_get("run-e").state == "completed", 60)
            await asyncio.sleep(2.5)  # a few more dead-owner scans (once a second)
            record = store.rt_get("run-t")
            assert record.engine == "temporal" and record.state == "pending"
            assert record.fence == 0 and record.lease_owner is None
            assert record.waiting_reason is None and store.load("run-t") is None
        finally:
            log = _stop(proc)
        said = [line for line in log.splitlines() if "run-t" in line]
        assert len(said) == 1, log
        assert "temporal engine" in said[0] and "leaves it" in said[0]
        assert not any("run-e" in line and "leaves it" in line for line in log.splitlines())
    finally:
        store.close()


def _record(run_id: str, **fields: object) -> RuntimeRun:
    return RuntimeRun(
        run_id=run_id,
        agent_id="steps",
        agent_version="1",
        session_id=f"s-{run_id}",
        prompt='"go"',
        state="pending",
        created_at=NOW,
        updated_at=NOW,
        **fields,
    )


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
