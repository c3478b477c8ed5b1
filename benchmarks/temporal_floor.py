"""The floor under Temporal's per-step overhead: one bare no-op activity round trip.

A step of a run on Temporal makes two activity calls (the model, the tool); this
measures what one costs on the same server with no nbdurable code in it, so the
benchmark can say how much of a step is Temporal's and how much is ours.
``Sequence`` replays the activities and local activities a run's workflow made,
in their order, with nothing in them: the floor ``restate_bench.py`` sets
beside Restate's (the same durable steps, no nbdurable code).
"""

from __future__ import annotations

import time
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

QUEUE = "bench-floor"


@activity.defn(name="bench.noop")
async def noop(value: int) -> int:
    """Return at once."""
    return value


@workflow.defn(name="bench.Noops")
class Noops:
    """``count`` no-op activities, one after another."""

    @workflow.run
    async def run(self, count: int) -> int:
        """Run them; the count."""
        for k in range(count):
            await workflow.execute_activity(
                "bench.noop", k, start_to_close_timeout=timedelta(seconds=10)
            )
        return count


async def activity_floor(address: str, count: int = 50) -> float:
    """Ms per no-op activity round trip (after a warm-up), with an in-process worker."""
    client = await Client.connect(address)
    async with Worker(
        client,
        task_queue=QUEUE,
        workflows=[Noops],
        activities=[noop],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        await client.execute_workflow("bench.Noops", 5, id="floor-warm", task_queue=QUEUE)
        started = time.perf_counter()
        await client.execute_workflow("bench.Noops", count, id="floor", task_queue=QUEUE)
        return (time.perf_counter() - started) * 1000 / count


@workflow.defn(name="bench.Sequence")
class Sequence:
    """No-op activities (``a``) and local activities (``l``) in a given order."""

    @workflow.run
    async def run(self, kinds: list[str]) -> int:
        """Run them; how many ran."""
        for k, kind in enumerate(kinds):
            if kind == "l":
                await workflow.execute_local_activity(
                    "bench.noop", k, start_to_close_timeout=timedelta(seconds=10)
                )
            else:
                await workflow.execute_activity(
                    "bench.noop", k, start_to_close_timeout=timedelta(seconds=10)
                )
        return len(kinds)


def floor_worker(client: Client) -> Worker:
    """An in-process worker of the floor's workflows (``async with`` it)."""
    return Worker(
        client,
        task_queue=QUEUE,
        workflows=[Noops, Sequence],
        activities=[noop],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )


async def history_kinds(client: Client, workflow_id: str) -> list[str]:
    """The activities (``a``) and local activities (``l``) a workflow ran, in order."""
    from temporalio.api.enums.v1 import EventType

    kinds = []
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            kinds.append("a")
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            kinds.append("l")  # the SDK records each local activity's result as a marker
    return kinds


async def sequence_ms(client: Client, kinds: list[str]) -> float:
    """Ms for one workflow running ``kinds`` (a floor worker must be running)."""
    started = time.perf_counter()
    await client.execute_workflow(
        "bench.Sequence", kinds, id=f"floor-{time.monotonic_ns()}", task_queue=QUEUE
    )
    return (time.perf_counter() - started) * 1000
