"""A rolling upgrade of versioned workers (``--deployment``) fails no workflow task (issue 39).

Runs of release one park on an approval; release one's worker stops, release
two's starts (another definition of the runs' agent: replaying their histories
there would fail each workflow task) and the runs are approved. Pinned to
release one's version, they wait for it, saying so, and no worker of release two
ever takes one of their tasks; once release one's worker is back they finish
there, while new runs go to release two, the current version.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from support import temporal_agents, temporal_definitions
from support.temporal_histories import broken_workflow_tasks

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.temporal import TemporalEngine
from nbdurable.temporal._versioning import build_id, waiting_for, worker_version

from .conftest import Cluster

RELEASE_ONE = ["--agents", "support.temporal_definitions:releaser_v1"]
RELEASE_TWO = ["--agents", "support.temporal_definitions:releaser_v2"]


async def until(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.1)


def client(cluster: Cluster, agents: list[nd.Agent]) -> DurableRuntime:
    engine = TemporalEngine(address=cluster.address, task_queue=cluster.queue)
    return DurableRuntime(store=cluster.store, agents=agents, engine=engine)


def served_by(agents: list[nd.Agent]) -> DurableRuntime:
    """A runtime serving what a test worker with ``agents`` serves (and no task)."""
    served = [*temporal_agents.agents, *agents]
    return DurableRuntime(store=nd.open_store("memory://"), agents=served)


async def test_runs_parked_across_a_rolling_upgrade_wait_for_their_release(
    cluster: Cluster,
) -> None:
    one = served_by(temporal_definitions.releaser_v1)
    assert build_id(one) != build_id(served_by(temporal_definitions.releaser_v2))
    store = cluster.store
    deployment = f"rollout-{cluster.queue}"  # a deployment of this test's own
    release_one, release_two = (
        [*r, "--deployment", deployment] for r in (RELEASE_ONE, RELEASE_TWO)
    )
    first = cluster.worker(args=release_one)
    async with client(cluster, temporal_definitions.releaser_v1) as rt:
        runs = [await rt.submit("releaser", f"Release {i}.") for i in range(3)]
        for run in runs:
            await asyncio.wait_for(run.wait("waiting_approval"), 60)
        first.stop()
        second = cluster.worker(args=release_two)
        for run in runs:
            await run.approve()
        # release two's worker resumes them (2 s after the approval) and says what they wait for
        reason = waiting_for(worker_version(deployment, one))
        ids = [run.run_id for run in runs]
        await until(lambda: all(store.rt_get(i).waiting_reason == reason for i in ids), 60)
        await asyncio.sleep(3)  # nothing of them runs meanwhile
        assert {store.rt_get(i).state for i in ids} == {"pending"}
        explained = nd.inspect.explain(store, ids[0], context="terminal")
        assert reason in str(explained) and "--deployment" in str(explained), explained

        cluster.worker(args=release_one)  # release one's worker is back: they finish there
        done = await asyncio.wait_for(asyncio.gather(*(r.result() for r in runs)), 120)
        assert {r.text for r in done} == {"Released b1 (release one)."}
        assert all(store.rt_get(i).waiting_reason is None for i in ids)

    # release two stays the current version: a new run (of its definition) runs there
    async with client(cluster, temporal_definitions.releaser_v2) as rt:
        run = await rt.submit("releaser", "Release again.")
        await asyncio.wait_for(run.wait("waiting_approval"), 60)
        await run.approve()
        assert (await asyncio.wait_for(run.result(), 60)).text == "Released b1 (release two)."
    second.stop()
    assert await broken_workflow_tasks(cluster.address, cluster.queue) == []


def test_the_build_id_follows_the_definitions_served() -> None:
    one = build_id(served_by(temporal_definitions.releaser_v1))
    assert one == build_id(served_by(temporal_definitions.releaser_v1))  # any process, any time
    assert one.startswith(f"{nd.__version__}-")
    assert one != build_id(served_by(temporal_definitions.releaser_v2))  # another definition
    assert one != build_id(served_by([]))  # one agent fewer
