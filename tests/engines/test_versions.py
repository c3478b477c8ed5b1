"""Every engine: workers serve agent versions, and runs belong to the engine they were
submitted to.

A run of a version no worker serves stays pending with its waiting reason (in the
record, ``explain`` and ``nbdurable runs list``) instead of failing; it completes
once a worker serving it starts. A worker leaves a run submitted to another engine
alone and says so once in its log.
"""

from __future__ import annotations

import asyncio

import pytest
from support.versioned_agents import steps_v1
from support.waiting import eventually

import nbdurable as nd
from nbdurable.cli import main
from nbdurable.runtime import DurableRuntime

from .conftest import EngineCase

REASON = "waits for a worker serving steps v1"
V1 = ["--agents", "support.versioned_agents:steps_v1"]
V2 = ["--agents", "support.versioned_agents:steps_v2"]


async def test_a_run_of_an_unserved_version_waits_for_a_worker_serving_it(
    engine: EngineCase, capsys: pytest.CaptureFixture[str]
) -> None:
    store = engine.store
    engine.worker(args=V2)
    async with engine.client(agents=steps_v1) as rt:
        run = await rt.submit("steps", "Go.", run_id="run-v1")
        await eventually(lambda: store.rt_get("run-v1").waiting_reason == REASON, timeout=30)
        await asyncio.sleep(3)  # the only worker (v2) has had dozens of chances
        record = store.rt_get("run-v1")
        assert record.engine == engine.name
        assert record.state == "pending" and record.fence == 0 and record.lease_owner is None
        assert store.load("run-v1") is None
        assert REASON in str(nd.inspect.explain(store, "run-v1"))
        assert nd.inspect.runs(store, all_columns=True).loc["run-v1", "waiting_reason"] == REASON
        assert main(["runs", "list", "--store", engine.url]) == 0
        assert REASON in " ".join(capsys.readouterr().out.split())

        engine.worker(args=V1)
        result = await asyncio.wait_for(run.result(), 90)
        assert result.text == "steps v1 answered."
    done = store.rt_get("run-v1")
    assert done.state == "completed" and done.waiting_reason is None
    assert done.fence == 1  # claimed once, by a worker serving v1


async def test_a_worker_leaves_another_engines_run_alone(engine: EngineCase) -> None:
    store = engine.store
    other = DurableRuntime(store=store, agents=steps_v1, engine=engine.other_engine())
    await other.submit("steps", "Go.", run_id="run-other")  # submits only: never opened
    async with engine.client(agents=steps_v1) as rt:
        run = await rt.submit("steps", "Go.", run_id="run-mine")
        worker = engine.worker(args=V1)
        assert (await asyncio.wait_for(run.result(), 60)).text == "steps v1 answered."
        await asyncio.sleep(4)  # past a worker's adoption delay (2 s), a few more scans
    record = store.rt_get("run-other")
    assert record.engine == other.engine.name and record.engine != engine.name
    assert record.state == "pending" and record.fence == 0 and record.lease_owner is None
    assert record.waiting_reason is None and store.load("run-other") is None
    worker.stop()
    assert worker.proc.stdout is not None
    log = worker.proc.stdout.read()
    said = [line for line in log.splitlines() if "run-other" in line]
    assert len(said) == 1, log
    assert f"{other.engine.name} engine" in said[0] and "leaves it" in said[0]
    assert not any("run-mine" in line and "leaves it" in line for line in log.splitlines())
