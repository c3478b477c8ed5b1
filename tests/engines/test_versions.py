"""Every engine: workers serve agent versions and definitions, and runs belong to the
engine they were submitted to.

A run of a version no worker serves, or of a definition (fingerprint) no worker
has, stays pending with its waiting reason (in the record, ``explain`` and
``nbdurable runs list``) instead of failing; it completes once a worker serving
it starts. Per-run settings (``stream``) are captured, not fingerprinted. A
worker leaves a run submitted to another engine alone and says so once in its log.
"""

from __future__ import annotations

import asyncio

import pytest
from support import temporal_definitions
from support.executions import tool_rows
from support.versioned_agents import steps_v1
from support.waiting import eventually

import nbdurable as nd
from nbdurable.cli import main
from nbdurable.runtime import DurableRuntime

from .conftest import EngineCase

REASON = "waits for a worker serving steps v1"
V1 = ["--agents", "support.versioned_agents:steps_v1"]
V2 = ["--agents", "support.versioned_agents:steps_v2"]
DEFINITION_REASON = (
    "waits for a runtime whose cleaner v1 matches the submitted definition; a runtime that "
    "saw it differs in its model, tool recovery and tools (sweep missing, vacuum added)"
)
X = ["--agents", "support.temporal_definitions:cleaner_x"]
Y = ["--agents", "support.temporal_definitions:cleaner_y"]
X_UNSTREAMED = ["--agents", "support.temporal_definitions:cleaner_x_unstreamed"]


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
        assert nd.inspect.runs(store).loc["run-v1", "waiting_reason"] == REASON
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


async def test_a_worker_with_another_definition_leaves_the_run_pending(
    engine: EngineCase,
) -> None:
    """Same agent id and version, another script: the worker never takes the run; a
    worker with the submitted definition runs it (its tool, never the other's)."""
    store = engine.store
    other = engine.worker(args=Y)
    async with engine.client(agents=temporal_definitions.cleaner_x) as rt:
        run = await rt.submit("cleaner", "Clean up.", run_id="run-x")
        await eventually(
            lambda: store.rt_get("run-x").waiting_reason == DEFINITION_REASON, timeout=30
        )
        await asyncio.sleep(3)  # the only worker has had dozens of chances
        record = store.rt_get("run-x")
        assert record.state == "pending" and record.fence == 0 and record.lease_owner is None
        assert store.load("run-x") is None and tool_rows(engine.tools) == []
        assert all(e.type == "run_state" for e in store.read_events("run-x"))
        shown = " ".join(str(nd.inspect.explain(store, "run-x")).split())
        assert DEFINITION_REASON in shown and "pending" in shown
        assert nd.inspect.runs(store, compact=True).loc["run-x", "reason"] == DEFINITION_REASON

        matching = engine.worker(args=X)
        result = await asyncio.wait_for(run.result(), 90)
        assert result.text == "Cleaner X swept stg_a."
    done = store.rt_get("run-x")
    assert done.state == "completed" and done.waiting_reason is None
    assert done.fence == 1  # claimed once, by the matching worker
    pids = {pid for _tool, pid in tool_rows(engine.tools)}
    assert tool_rows(engine.tools) == [("sweep", matching.proc.pid)] and pids != {other.proc.pid}


@pytest.mark.spec("S003-32")
async def test_a_worker_registered_without_streaming_runs_a_streamed_submission(
    engine: EngineCase,
) -> None:
    engine.worker(args=X_UNSTREAMED)
    async with engine.client(agents=temporal_definitions.cleaner_x) as rt:
        run = await rt.submit("cleaner", "Clean up.", run_id="run-streamed")
        assert run.record().stream is True
        try:
            result = await asyncio.wait_for(run.result(), 90)
        except TimeoutError:
            reason = engine.store.rt_get("run-streamed").waiting_reason
            raise AssertionError(f"no worker ran it: {reason}") from None
        assert result.text == "Cleaner X swept stg_a."
    events = engine.store.read_events("run-streamed")
    assert any(e.type == "model_delta" for e in events)  # streamed, as captured
