"""Temporal workers serve agent versions; runs belong to the engine they were submitted to.

A worker that serves only ``steps`` v2 hands a v1 run on (its workflow waits and
continues as new, the run stays pending with its waiting reason) instead of
failing it; the run completes once a worker serving v1 polls the queue. A
Temporal worker leaves a run submitted to the embedded engine alone.
"""

from __future__ import annotations

import asyncio
import time

from support.versioned_agents import steps_v1

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.temporal import TemporalEngine

from .conftest import Cluster

REASON = "waits for a worker serving steps v1"
V1 = ["--agents", "support.versioned_agents:steps_v1"]
V2 = ["--agents", "support.versioned_agents:steps_v2"]


async def until(check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.1)


async def test_a_v1_run_waits_for_a_worker_serving_v1(cluster: Cluster) -> None:
    cluster.worker(args=V2)
    engine = TemporalEngine(address=cluster.address, task_queue=cluster.queue)
    store = cluster.store
    async with DurableRuntime(store=store, agents=steps_v1, engine=engine) as rt:
        run = await rt.submit("steps", "Go.", run_id="run-v1")
        await until(lambda: store.rt_get("run-v1").waiting_reason == REASON, 30)
        await asyncio.sleep(3)  # the workflow keeps coming back to the only (v2) worker
        record = store.rt_get("run-v1")
        assert record.engine == "temporal"
        assert record.state == "pending" and record.fence == 0, record
        assert store.load("run-v1") is None
        assert REASON in str(nd.inspect.explain(store, "run-v1"))

        cluster.worker(args=V1)
        result = await asyncio.wait_for(run.result(), 90)
        assert result.text == "steps v1 answered."
        done = store.rt_get("run-v1")
        assert done.state == "completed" and done.waiting_reason is None


async def test_a_temporal_worker_leaves_an_embedded_run_alone(cluster: Cluster) -> None:
    store = cluster.store
    embedded = DurableRuntime(store=store, agents=steps_v1)  # submits only: never opened
    await embedded.submit("steps", "Go.", run_id="run-e")
    worker = cluster.worker(args=V1)
    await asyncio.sleep(5)  # past the worker's adoption delay (2 s), a few dispatches
    record = store.rt_get("run-e")
    assert record.engine == "embedded" and record.state == "pending" and record.fence == 0
    worker.stop()
    assert worker.proc.stdout is not None
    log = worker.proc.stdout.read()
    said = [line for line in log.splitlines() if "run-e" in line]
    assert len(said) == 1, log
    assert "embedded engine" in said[0] and "leaves it" in said[0]
