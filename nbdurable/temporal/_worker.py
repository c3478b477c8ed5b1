"""The Temporal worker: the run and task workflows and their activities, in a process.

The worker's runtime executes nothing itself: its engine is a
:class:`~nbdurable.temporal._engine.TemporalEngine` with ``adopt_after``, so a
worker alone (no client connected) still resumes runs that became pending
(graph nodes promoted, runs retried or approved from the CLI), and cancels the
workflows of runs cancelled from here (a cancelled task's owned runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from .. import metrics as _metrics
from ..durable.store import HistoryStore
from ..runtime import _lifecycle as lifecycle
from ..runtime._agent import Agent
from ..runtime._limits import Limits
from ..runtime._notify import Notifier
from ..runtime._runtime import DurableRuntime
from ..runtime._seam import RunServices
from ..runtime._tasks import TaskDefinition
from ._activities import RunActivities, calls_in_flight
from ._connection import TemporalConnection
from ._drain import start_draining
from ._engine import TemporalEngine
from ._registry import set_worker_runtime, worker_runtime
from ._routing import TASK_DEFINITION, definition_queue
from ._tasks import TaskActivities, TaskRunWorkflow
from ._telemetry import SdkTelemetry
from ._tracing import client_interceptors
from ._versioning import deployment_config, known_builds, promote, worker_version
from ._workflow import AgentRunWorkflow

if TYPE_CHECKING:
    from ..health import ReadinessProbe

__all__ = [
    "ADOPT_AFTER",
    "TASK_WORKFLOW_NAME",
    "WORKFLOW_NAME",
    "build_definition_workers",
    "build_worker",
    "serve",
]

WORKFLOW_NAME = "nbdurable.AgentRun"
TASK_WORKFLOW_NAME = "nbdurable.TaskRun"
ADOPT_AFTER = 2.0
"""Seconds a run stays pending before a worker starts its workflow (clients go first,
with their own timeouts)."""


def build_worker(
    client: Client,
    *,
    task_queue: str,
    store: HistoryStore,
    agents: Iterable[Agent],
    tasks: Sequence[TaskDefinition] = (),
    limits: Limits | None = None,
    max_concurrent_activities: int = 100,
    drain_seconds: float = 0.0,
    notify: Notifier | None = None,
    deployment: str | None = None,
) -> Worker:
    """A worker for ``task_queue`` serving ``agents`` and ``tasks``, mirroring into ``store``.

    The workflows run unsandboxed (their code is the package's, deterministic by
    construction; the agents' tools and models and the tasks' phases are this
    process's objects). The worker's runtime (:func:`worker_runtime`) is not
    started: :func:`serve` starts its engine. Its ``limits`` (``max_operations``,
    ``max_payload_bytes``) apply to the runs this worker executes. Once it shuts
    down, the activities in flight have ``drain_seconds`` to finish before they
    are cancelled (the SDK's graceful shutdown timeout). ``notify`` posts a
    message when a run starts waiting on a human (:class:`Notifier`).

    ``deployment``: the worker declares a version of this Worker Deployment, its
    build id derived from the nbdurable code and the definitions it serves, and
    its workflows are pinned to the version they started on
    (:mod:`nbdurable.temporal._versioning`; :func:`serve` makes a new release's
    version current).
    """
    engine = TemporalEngine(task_queue=task_queue, client=client, adopt_after=ADOPT_AFTER)
    runtime = DurableRuntime(
        store=store,
        agents=agents,
        tasks=tasks,
        engine=engine,
        limits=limits,
        notify=notify,
        record_mirror=False,  # a worker makes no synchronous reads
    )
    set_worker_runtime(runtime)
    versioning: dict[str, Any] = {}
    if deployment is not None:
        engine.version = worker_version(deployment, runtime)
        versioning["deployment_config"] = deployment_config(engine.version)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentRunWorkflow, TaskRunWorkflow],
        activities=[*RunActivities(runtime).all(), *TaskActivities(runtime).all()],
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_concurrent_activities=max_concurrent_activities,
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=2),
        graceful_shutdown_timeout=timedelta(seconds=drain_seconds),
        **versioning,
    )


def build_definition_workers(
    client: Client,
    *,
    task_queue: str,
    runtime: RunServices,
    max_concurrent_activities: int = 100,
    drain_seconds: float = 0.0,
) -> list[Worker]:
    """Workers polling the queues of the definitions ``runtime`` serves (activities only).

    A run's model or tool activity that a worker of another definition handed
    back is scheduled again on the queue of the run's own definition
    (:func:`~nbdurable.temporal._routing.definition_queue`), which these workers
    poll, so it no longer goes back to whichever worker of ``task_queue`` polls
    first. :func:`serve` runs them beside :func:`build_worker`'s worker; a host of
    its own runs them too (without them a handed-back activity waits
    ``ROUTED_WAIT`` on that queue, then goes back to ``task_queue``). A
    definition's queues are those of its fingerprint and of its digest under
    the previous scheme (a run recorded before fingerprints had parts names
    that one; :class:`~nbdurable.runtime._fingerprint.Definition`). Each task
    version it executes has a queue too, where a task run's ``task_begin``
    handed back elsewhere waits.
    """
    agents = {
        definition_queue(task_queue, agent_id, version, fingerprint)
        for (agent_id, version), found in runtime.registry.definitions().items()
        for fingerprint in (found.fingerprint, found.legacy)
    }
    tasks = {
        definition_queue(task_queue, name, version, TASK_DEFINITION)
        for name, version in runtime.task_keys()
    }
    activities = {
        "agents": RunActivities(runtime).all(),
        "tasks": TaskActivities(runtime).all(),
    }
    return [
        Worker(
            client,
            task_queue=queue,
            activities=activities["agents" if queue in agents else "tasks"],
            max_concurrent_activities=max_concurrent_activities,
            # Only hand-backs come here: two pollers are plenty.
            max_concurrent_activity_task_polls=2,
            graceful_shutdown_timeout=timedelta(seconds=drain_seconds),
        )
        for queue in sorted(agents | tasks)
    ]


async def _drain_until(stop: asyncio.Event, sdk: SdkTelemetry) -> None:
    """Fold the SDK's buffered metrics in once a second until ``stop`` (its buffer is bounded)."""
    while not stop.is_set():
        sdk.drain()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


def _print(line: str) -> None:
    print(line, flush=True)


async def serve(
    *,
    address: str,
    task_queue: str,
    store: HistoryStore,
    agents: Iterable[Agent],
    tasks: Sequence[TaskDefinition] = (),
    limits: Limits | None = None,
    namespace: str = "default",
    ready: str | None = None,
    probe: ReadinessProbe | None = None,
    drain_seconds: float = 0.0,
    connection: TemporalConnection | None = None,
    notify: Notifier | None = None,
    say: Callable[[str], None] | None = None,
    deployment: str | None = None,
) -> int:
    """Run a worker until SIGTERM or SIGINT; print ``ready`` once it polls.

    ``say(line)`` writes ``ready`` and the line that says it drains (default:
    ``print``; ``nbdurable worker`` writes them in its log format).

    The first signal stops polling and lets the activities in flight finish for
    up to ``drain_seconds`` (then they are cancelled, and their retries find the
    calls interrupted); a second one returns at once, leaving them to their
    heartbeat timeout, as a crash would. ``connection`` holds the TLS and API key
    options of a secured cluster. ``deployment``: the worker is versioned
    (:func:`build_worker`); once it polls, its version becomes the deployment's
    current one unless the deployment knew its build already (an earlier
    release started again for its pinned runs).
    """
    # with tracing on (nbdurable.instrument() in the agents' module), the SDK's
    # interceptor on the client serves the worker too
    connection = connection or TemporalConnection()
    # the SDK's warnings go to this process's log format, its metrics to /metrics
    sdk = SdkTelemetry(metrics=_metrics.HOOKS is not None)
    if _metrics.HOOKS is not None:
        _metrics.HOOKS.registry.register(sdk)
    client = await connection.connect(address, namespace, client_interceptors(), sdk.runtime)
    worker = build_worker(
        client,
        task_queue=task_queue,
        store=store,
        agents=agents,
        tasks=tasks,
        limits=limits,
        drain_seconds=drain_seconds,
        notify=notify,
        deployment=deployment,
    )
    known = await known_builds(client, deployment) if deployment is not None else None
    if probe is not None:  # /readyz checks the server too
        from ..health import temporal_check

        probe.add("temporal", temporal_check(client))
    runtime = worker_runtime()
    assert isinstance(runtime, DurableRuntime)  # build_worker's: serve opens and closes it
    engine = runtime.engine
    assert isinstance(engine, TemporalEngine)
    definitions = build_definition_workers(
        client, task_queue=task_queue, runtime=runtime, drain_seconds=drain_seconds
    )
    stop, hurry = asyncio.Event(), asyncio.Event()
    stopping: list[asyncio.Task[None]] = []
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, lambda: (hurry if stop.is_set() else stop).set())

    async def run() -> None:
        try:
            # Leaving them shuts them down gracefully: activities get drain_seconds.
            async with contextlib.AsyncExitStack() as workers:
                for each in (worker, *definitions):
                    await workers.enter_async_context(each)
                await runtime.__aenter__()
                try:
                    line, version = ready, engine.version
                    if version is not None:
                        now = ", now current" if await promote(client, version, known) else ""
                        build = f"{version.deployment_name} {version.build_id}{now}"
                        line = f"{ready} (deployment {build})"
                    if ready:
                        (say or _print)(line or ready)
                    await _drain_until(stop, sdk)
                    await stop.wait()
                    start_draining()  # before the SDK's shutdown: no call starts from now
                    # Every worker stops polling now (leaving the stack waits for each in
                    # turn, and one still polling would take tasks only to hand them back).
                    stopping.extend(loop.create_task(w.shutdown()) for w in (worker, *definitions))
                    (say or _print)(f"nbdurable worker draining (up to {drain_seconds:g} s)")
                finally:
                    with contextlib.suppress(Exception):  # no more adoptions
                        await asyncio.wait_for(runtime.engine.close(), 10)
        finally:
            # After the drain: the activities in flight used the runtime's resources.
            with contextlib.suppress(Exception):  # a server gone away must not hold the exit
                await asyncio.wait_for(runtime.close(), 10)

    running = loop.create_task(run())
    hurried = loop.create_task(hurry.wait())
    try:
        await asyncio.wait({running, hurried}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        hurried.cancel()
        for signum in (signal.SIGTERM, signal.SIGINT):
            # A loop left holding them fails to reset them from the thread that
            # collects it.
            loop.remove_signal_handler(signum)
    if not running.done():
        # A second signal: the activities in flight are left as a crash leaves them
        # (the caller exits the process now).
        lifecycle.logger.warning("nbdurable worker: second signal, exiting without draining")
        for run_id, call in calls_in_flight():
            lifecycle.cut(run_id, call)
        return 0
    running.result()
    with contextlib.suppress(Exception):
        store.close()
    return 0
