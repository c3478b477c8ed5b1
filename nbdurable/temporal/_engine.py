"""TemporalEngine: a runtime's runs execute as Temporal workflows (workflow id = run id).

The client side of the engine seam. The runtime keeps writing run records
(submit, approve, deny, retry, cancel) to the store; the engine turns every
record that became ``pending`` into a signal-with-start of the run's workflow
(``resume``, carrying the verdicts), and every cancelled run into a workflow
cancellation. Workers (``nbdurable worker --engine temporal``) execute them.
Agent runs (graph nodes and a task's owned runs included) run as
``nbdurable.AgentRun`` workflows, custom tasks as ``nbdurable.TaskRun``.

Each worker runs an engine of its own too, with ``adopt_after``: it resumes the
records that stayed pending that long (a graph node promoted while no client is
connected, a run retried from the CLI, a run whose client went away before
dispatching), starting their workflows when they have none.
"""

from __future__ import annotations

import contextlib
import functools
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import Client, WorkflowFailureError
from temporalio.common import WorkerDeploymentVersion
from temporalio.service import RPCError

from .._errors import FencedOutError
from ..runs import TEMPORAL, RunPatch
from ..runtime._dispatching import DispatchingEngine
from ._config import TemporalConfig
from ._connection import TemporalConnection
from ._tracing import client_interceptors, started_under
from ._versioning import pinned_version, waiting_for
from ._workflow import config_args

if TYPE_CHECKING:
    from ..runs import RuntimeRun

__all__ = ["WORKFLOWS", "TemporalEngine", "start_run"]

WORKFLOWS: dict[str, str] = {"agent": "nbdurable.AgentRun", "task": "nbdurable.TaskRun"}
"""The workflow type of each record kind."""


async def start_run(
    client: Client,
    record: RuntimeRun,
    config: TemporalConfig,
    task_queue: str,
    task_timeout: float | None = None,
) -> None:
    """Signal-with-start the workflow of a pending run: ``resume``, carrying its verdicts.

    ``task_timeout``: seconds a worker has for one workflow task (None: the server's 10).
    With tracing on, under the run's stored trace context: the SDK's spans join the run's trace.
    """
    with started_under(record):
        await client.start_workflow(
            WORKFLOWS[record.kind],
            config_args(config),
            id=record.run_id,
            task_queue=task_queue,
            task_timeout=None if task_timeout is None else timedelta(seconds=task_timeout),
            start_signal="resume",
            start_signal_args=[
                {key: v.model_dump(mode="json") for key, v in record.verdicts.items()}
            ],
        )


async def _ended(client: Client, run_id: str) -> None:
    """Return when the run's workflow closed (its result: a final state, or a failure)."""
    with contextlib.suppress(WorkflowFailureError):
        await client.get_workflow_handle(run_id).result()


class TemporalEngine(DispatchingEngine):
    """Execute a runtime's agent runs on Temporal.

    Args:
        address: The Temporal frontend, ``host:port``.
        task_queue: The queue the workers poll.
        namespace: The Temporal namespace.
        model_timeout: Seconds one model attempt may take.
        tool_timeout: Seconds one tool call may take.
        heartbeat_timeout: Seconds of worker silence before an activity is retried
            elsewhere (a SIGKILLed worker is noticed after this).
        tool_retries: Attempts of a ``safe``/``idempotent`` tool after a worker loss.
        client: An already connected client (default: connect to ``address``).
        connection: TLS and API key of the connection to ``address`` (a secured
            cluster, Temporal Cloud); default: plain, as to a dev server.
        adopt_after: For a worker's engine: leave pending runs to clients for this
            many seconds, then resume those still pending (starting the workflow
            of those that have none, with this engine's timeouts; a duplicate
            resume is a no-op). None (a client): dispatch at once.
        version: For a versioned worker's engine (``--deployment``): the worker's
            deployment version. A run it resumes whose workflow is pinned to
            another version gets the waiting reason that names that version.
        workflow_task_timeout: Seconds a worker has to complete one workflow task
            of the runs this engine starts before the server hands it to another
            (a worker stopped while it held one holds up its run this long). None:
            the server's default, 10 s.
    """

    name = TEMPORAL
    server = "Temporal"
    kinds = cancels = tuple(WORKFLOWS)

    def __init__(
        self,
        address: str = "127.0.0.1:7233",
        task_queue: str = "nbdurable",
        namespace: str = "default",
        *,
        model_timeout: float = 300.0,
        tool_timeout: float = 600.0,
        heartbeat_timeout: float = 10.0,
        tool_retries: int = 5,
        client: Client | None = None,
        adopt_after: float | None = None,
        connection: TemporalConnection | None = None,
        version: WorkerDeploymentVersion | None = None,
        workflow_task_timeout: float | None = None,
    ) -> None:
        self.address = address
        self.version = version
        self.connection = connection or TemporalConnection()
        self.task_queue = task_queue
        self.namespace = namespace
        self._timeouts: dict[str, Any] = {
            "model_timeout": model_timeout,
            "tool_timeout": tool_timeout,
            "heartbeat_timeout": heartbeat_timeout,
            "tool_retries": tool_retries,
        }
        self.workflow_task_timeout = workflow_task_timeout
        self._client = client
        super().__init__(adopt_after)

    def config(self, run_id: str) -> TemporalConfig:
        """The workflow settings of ``run_id``."""
        return TemporalConfig(run_id=run_id, **self._timeouts)

    async def client(self) -> Client:
        """The connected Temporal client (with the SDK's tracing interceptor when tracing is on)."""
        if self._client is None:
            self._client = await self.connection.connect(
                self.address, self.namespace, client_interceptors()
            )
        return self._client

    async def dispatch_once(self, woken: bool = True) -> None:
        """Connect first: a server that is away is said so even with nothing to send."""
        await self.client()
        await super().dispatch_once(woken)

    async def send(self, record: RuntimeRun) -> bool:
        """Signal-with-start the run's workflow (``resume``, carrying its verdicts)."""
        client = await self.client()
        config = self.config(record.run_id)
        await start_run(client, record, config, self.task_queue, self.workflow_task_timeout)
        if self.adopt_after is None:  # a client: its waiters learn of the end at once
            ended = functools.partial(_ended, client, record.run_id)
            self.watch_end(record.run_id, record.run_id, ended)
        if self.version is not None:
            await self._say_pinned(client, record)
        return True

    async def cancel(self, record: RuntimeRun) -> bool:
        """Cancel the run's workflow."""
        with contextlib.suppress(RPCError):  # no such workflow, or it closed already
            await (await self.client()).get_workflow_handle(record.run_id).cancel()
        return True

    async def _say_pinned(self, client: Client, record: RuntimeRun) -> None:
        """Record on ``record`` the version it waits for, when it is pinned to another one.

        Fenced: a worker of that version that took the run meanwhile keeps its claim.
        """
        pinned = await pinned_version(client, record.run_id)
        if pinned is None or pinned == self.version:
            return
        reason = waiting_for(pinned)
        if record.waiting_reason == reason:
            return
        with contextlib.suppress(FencedOutError):
            self.runtime.runtime_store.rt_update(
                record.run_id, RunPatch(waiting_reason=reason), fence=record.fence
            )

    def poll_period(self) -> float:
        """A worker's engine (``adopt_after``) looks every ``idle_poll_interval`` at least.

        It adopts runs pending for ``adopt_after`` seconds and cancels the
        workflows of runs cancelled without a client's engine (a fallback: a
        client sends its own at once); a look every 50 ms added two reads of
        the store 20 times a second to every worker, busy or idle. A write of
        this process's activities still wakes it at once.
        """
        period = super().poll_period()
        if self.adopt_after is None:
            return period
        return max(period, min(self.runtime.idle_poll_interval, self.adopt_after / 2))
