"""The Temporal worker: the run workflow and its activities, in a process of their own."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from ..runtime.agent import Agent
from ..runtime.runtime import DurableRuntime
from .activities import RunActivities
from .registry import set_worker_runtime
from .workflow import AgentRunWorkflow

__all__ = ["WORKFLOW_NAME", "build_worker", "serve"]

WORKFLOW_NAME = "nbdurable.AgentRun"


def build_worker(
    client: Client,
    *,
    task_queue: str,
    store: Any,
    agents: Iterable[Agent],
    max_concurrent_activities: int = 100,
) -> Worker:
    """A worker for ``task_queue`` serving ``agents`` and mirroring into ``store``.

    The workflow runs unsandboxed (its code is the package's, deterministic by
    construction; the agents' tools and models are this process's objects).
    """
    runtime = DurableRuntime(store=store, agents=agents)
    set_worker_runtime(runtime)
    activities = RunActivities(runtime)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentRunWorkflow],
        activities=activities.all(),
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_concurrent_activities=max_concurrent_activities,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
    )


async def serve(
    *,
    address: str,
    task_queue: str,
    store: Any,
    agents: Iterable[Agent],
    namespace: str = "default",
    ready: str | None = None,
) -> int:
    """Run a worker until SIGTERM or SIGINT; print ``ready`` once it polls."""
    client = await Client.connect(address, namespace=namespace)
    worker = build_worker(client, task_queue=task_queue, store=store, agents=agents)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with worker:
        if ready:
            print(ready, flush=True)
        await stop.wait()
    with contextlib.suppress(Exception):
        close = getattr(store, "close", None)
        if close is not None:
            close()
    return 0
