"""Temporal workers execute a run only with the definition it was submitted under (issue 16).

Workers of one task queue that disagree about ``cleaner`` v1: the one whose
definition differs neither runs the workflow's leg nor any of its activities (it
hands them back untouched, to the definition's own queue). That the run waits,
with its waiting reason, for a worker with the submitted definition, on every
engine: tests/engines/test_versions.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from support import temporal_definitions
from support.executions import tool_rows
from support.temporal_dev import EAGER_OFF, ONE_PARTITION
from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner

import nbdurable as nd
from nbdurable.runtime import DurableRuntime, RunResult
from nbdurable.temporal import TemporalEngine
from nbdurable.temporal._devserver import DevServer
from nbdurable.temporal._driver import DEFINITION_MISMATCH
from nbdurable.temporal._registry import set_worker_runtime
from nbdurable.temporal._routing import definition_queue
from nbdurable.temporal._tasks import TaskRunWorkflow
from nbdurable.temporal._workflow import AgentRunWorkflow

from .conftest import Cluster, Worker

X = ["--agents", "support.temporal_definitions:cleaner_x"]
Y = ["--agents", "support.temporal_definitions:cleaner_y"]


def client(cluster: Cluster) -> DurableRuntime:
    """A notebook's runtime: it defines cleaner X and dispatches to the cluster's queue."""
    engine = TemporalEngine(address=cluster.address, task_queue=cluster.queue)
    return DurableRuntime(store=cluster.store, agents=temporal_definitions.cleaner_x, engine=engine)


async def test_activities_a_mismatched_worker_picks_up_go_to_the_definitions_queue(
    tmp_path: Path, cluster: Cluster
) -> None:
    with own_server(tmp_path, cluster) as (server, here, env):
        workers = [Worker(here.address, here.queue, here.url, env, args=a) for a in (Y, X)]
        try:
            async with client(here) as rt:
                runs = [await rt.submit("cleaner", f"Clean up {i}.") for i in range(6)]
                results = await asyncio.wait_for(asyncio.gather(*(r.result() for r in runs)), 300)
                fingerprint = rt.registry.fingerprint("cleaner", "1")
            assert fingerprint is not None
            own = definition_queue(here.queue, "cleaner", "1", fingerprint)
            seen = await _activities(server.address, here.queue)
        finally:
            for worker in workers:
                worker.stop()
    assert {r.text for r in results} == {"Cleaner X swept stg_a."}
    rows = tool_rows(cluster.tools)
    assert len(rows) == 6 and {pid for _tool, pid in rows} == {workers[1].proc.pid}
    # the other worker took model or tool calls and workflow tasks, and gave them back
    assert seen.handed_back > 0 and seen.moved > 0, seen
    # each call it gave back went next to the definition's own queue, where only the
    # matching worker polls: none was given back twice (unless a routed attempt
    # waited past ROUTED_WAIT on a loaded machine: that call went back to the queue)
    assert seen.routed > 0 and seen.queues == {own} and seen.handed_back_routed == 0, (seen, own)
    if seen.not_taken == 0:
        assert seen.routed == seen.handed_back, seen
    # the routed workflows replay deterministically on the current code
    set_worker_runtime(
        DurableRuntime(store=nd.open_store("memory://"), agents=temporal_definitions.cleaner_x)
    )
    replayer = Replayer(
        workflows=[AgentRunWorkflow, TaskRunWorkflow], workflow_runner=UnsandboxedWorkflowRunner()
    )
    for history in seen.histories:
        await replayer.replay_workflow(history)


async def test_a_handed_back_activity_no_worker_takes_from_its_queue_goes_back(
    tmp_path: Path, cluster: Cluster
) -> None:
    # The matching worker polls the task queue only (a host without the definitions'
    # queues, or an earlier release): a routed attempt waits ROUTED_WAIT unclaimed,
    # then goes back to the task queue, where that worker takes it.
    main_queue_only = ("-m", "support.temporal_main_queue_worker")
    with own_server(tmp_path, cluster) as (server, here, env):
        other = Worker(here.address, here.queue, here.url, env, args=Y)
        plain = Worker(here.address, here.queue, here.url, env, args=X, command=main_queue_only)
        results: list[RunResult] = []
        try:
            async with client(here) as rt:
                # The other worker takes about half of the activities; batches go on
                # until it took (and handed back) one, which all but always the first does.
                for batch in range(3):
                    runs = [await rt.submit("cleaner", f"Clean up {batch}.{i}.") for i in range(4)]
                    done = await asyncio.wait_for(asyncio.gather(*(r.result() for r in runs)), 300)
                    results.extend(done)
                    seen = await _activities(server.address, here.queue)
                    if seen.handed_back:
                        break
        finally:
            other.stop()
            plain.stop()
    assert {r.text for r in results} == {"Cleaner X swept stg_a."}
    rows = tool_rows(cluster.tools)
    assert len(rows) == len(results) and {pid for _tool, pid in rows} == {plain.proc.pid}
    # every routed attempt waited unclaimed, then went back to the task queue
    assert seen.routed > 0 and seen.not_taken == seen.routed, seen


@contextlib.contextmanager
def own_server(
    tmp_path: Path, cluster: Cluster
) -> Iterator[tuple[DevServer, Cluster, dict[str, str]]]:
    """A server of its own that dispatches every activity through the task queue.

    The dev server's default hands a workflow's activities to the worker that
    scheduled them, so another worker would never see one. Yields the server,
    the cluster on it and the workers' environment.
    """
    with DevServer(tmp_path / "dev.db", extra_args=(*EAGER_OFF, *ONE_PARTITION)) as server:
        env = {"NBDURABLE_TEST_TOOLS": str(cluster.tools)}
        yield server, replace(cluster, address=server.address), env


@dataclass
class Seen:
    """What the queue's workflow histories say of the activities."""

    handed_back: int = 0
    """Activities handed back for a definition mismatch."""
    handed_back_routed: int = 0
    """Of those, the ones scheduled on a definition's queue."""
    routed: int = 0
    """Activities scheduled on a definition's queue."""
    not_taken: int = 0
    """Activities no worker took before their schedule-to-start timeout."""
    moved: int = 0
    """Runs continued as new (a leg's start handed on)."""
    queues: set[str] = field(default_factory=set)
    """The definition queues activities were scheduled on."""
    histories: list[WorkflowHistory] = field(default_factory=list, repr=False)
    """The histories of the workflows with a routed activity."""


async def _activities(address: str, queue: str) -> Seen:
    """Hand-backs, routed activities and runs continued as new, in the queue's histories."""
    temporal = await Client.connect(address)
    seen = Seen()
    async for execution in temporal.list_workflows(f"TaskQueue = '{queue}'"):
        handle = temporal.get_workflow_handle(execution.id, run_id=execution.run_id)
        scheduled: dict[int, str] = {}
        history = await handle.fetch_history()
        if any(
            event.activity_task_scheduled_event_attributes.task_queue.name not in ("", queue)
            for event in history.events
        ):
            seen.histories.append(history)
        for event in history.events:
            if event.HasField("activity_task_scheduled_event_attributes"):
                name = event.activity_task_scheduled_event_attributes.task_queue.name
                scheduled[event.event_id] = name
                if name != queue:
                    seen.routed += 1
                    seen.queues.add(name)
            if event.HasField("activity_task_failed_event_attributes"):
                attributes = event.activity_task_failed_event_attributes
                if attributes.failure.application_failure_info.type == DEFINITION_MISMATCH:
                    seen.handed_back += 1
                    seen.handed_back_routed += scheduled[attributes.scheduled_event_id] != queue
            if event.HasField("activity_task_timed_out_event_attributes"):
                failure = event.activity_task_timed_out_event_attributes.failure
                timeout = failure.timeout_failure_info.timeout_type
                seen.not_taken += timeout == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                seen.moved += 1
    return seen


def test_a_definitions_queue_is_named_by_the_whole_definition() -> None:
    queue = definition_queue("agents", "cleaner", "1", "f" * 64)
    assert queue.startswith("agents.definition-") and queue == definition_queue(
        "agents", "cleaner", "1", "f" * 64
    )
    others = {
        definition_queue("agents", "cleaner", "1", "e" * 64),
        definition_queue("agents", "cleaner", "2", "f" * 64),
        definition_queue("agents", "sweeper", "1", "f" * 64),
        definition_queue("other", "cleaner", "1", "f" * 64),
        # the parts are kept apart: no two definitions run together into one key
        definition_queue("agents", "cleaner1", "", "f" * 64),
    }
    assert queue not in others and len(others) == 5
