"""The floor under Temporal's per-step overhead: one bare no-op activity round trip.

A step of a run on Temporal makes two activity calls (the model, the tool); this
measures what one costs on the same server with no nbdurable code in it, so the
benchmark can say how much of a step is Temporal's and how much is ours.
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
