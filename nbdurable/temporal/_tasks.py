"""Custom tasks on Temporal: one workflow per task run, one activity per phase.

``TaskRunWorkflow`` (workflow id = run id) takes the pending task run (a fenced
compare-and-set to ``running``), runs each phase not yet checkpointed as an
activity, then writes the final state. The phase activity runs the embedded
engine's :func:`~nbdurable.runtime._tasks.run_phase`: the state it returns is
journaled before the activity completes, so a phase whose worker died (noticed
by the heartbeat timeout) runs again elsewhere from the last journaled state,
and a journaled phase never runs again. Owned runs a phase spawns are agent
runs; the phase's worker starts their workflows itself, with the task's settings.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, replace
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from ..durable._offload import offload
from ..runs import (
    TERMINAL_STATES,
    RunPatch,
    RuntimeRun,
    unserved_reason,
)
from ..runtime._leg_steps import TaskSteps
from ..runtime._legs_outside import finish_task_run
from ..runtime._run import Run
from ..runtime._seam import RunServices
from ..runtime._tasks import (
    TaskContext,
    TaskDefinition,
    TaskExecution,
    run_phase,
)
from ._activities import BoundActivities, decisions, heartbeats
from ._config import TemporalConfig
from ._driver import DEFINITION_MISMATCH
from ._engine import start_run
from ._routing import (
    TASK_DEFINITION,
    TASK_DEFINITION_QUEUES,
    TASK_ROUTED_WAIT,
    HandBacks,
    handed_back_delay,
)

__all__ = ["PHASE_TIMEOUT", "TaskActivities", "TaskRunWorkflow"]

PHASE_TIMEOUT = timedelta(days=365)
"""How long one phase may run: it may await owned runs that wait for a human, so a
lost worker is noticed by the heartbeat timeout, not by this."""

TASK_HAND_BACK = "nbdurable-task-hand-back"
"""Patch: ``task_begin`` is retried within 10 s (not up to 100 s) when a worker handed it back."""
FAILURES = ("timeout", "limit_exceeded", "error")
"""ApplicationError types of a phase that fail the task (the failure's reason)."""


class PhaseContext(TaskContext):
    """A phase's context on a worker: owned runs' workflows start from the phase.

    No scheduler runs in a worker's runtime, and no client may be connected:
    the phase starts the workflow of each owned run it finds pending, with the
    task's timeouts, on the task's queue.
    """

    def __init__(
        self,
        runtime: RunServices,
        run_id: str,
        task: TaskDefinition,
        phase_index: int,
        *,
        client: Client,
        task_queue: str,
        config: TemporalConfig,
    ) -> None:
        super().__init__(runtime, run_id, task, phase_index, on_submitted=self._start_workflow)
        self._client = client
        self._task_queue = task_queue
        self._config = config

    async def _start_workflow(self, run: Run) -> None:
        record = run.record()
        if record.state == "pending":
            config = replace(self._config, run_id=run.run_id)
            await start_run(self._client, record, config, self._task_queue)


class TaskActivities(BoundActivities, TaskSteps):
    """The task workflow's activities."""

    def _hand_back(self, record: RuntimeRun) -> ApplicationError:
        """The error handing a task's activity back, naming the run's task version.

        Any worker of the queue may pick a task's activity up: one that does not
        serve the run's ``(task, version)`` (or not all the agents it declares)
        hands it back untouched; the workflow schedules ``task_begin`` again on
        that version's queue (a history recorded before that: the server
        retries it for whichever worker polls next).
        """
        return ApplicationError(
            unserved_reason(record),
            # where the workflow sends the next attempt: this task version's queue
            record.agent_id,
            record.agent_version,
            TASK_DEFINITION,
            type=DEFINITION_MISMATCH,
        )

    def _served(self, record: RuntimeRun) -> TaskDefinition:
        """The run's task; a hand-back when this worker does not execute it."""
        task = self._task(record)
        if task is None:
            raise self._hand_back(record)
        return task

    def phase_task(self, record: RuntimeRun) -> TaskDefinition:
        """A running task reached a worker that lacks it: hand back."""
        return self._served(record)

    def task_elsewhere(self, record: RuntimeRun) -> dict[str, Any]:
        """Hand the activity back: the run stays pending until a worker serving it polls."""
        raise self._hand_back(record)

    async def run_phase(self, execution: TaskExecution, index: int, state: Any, how: Any) -> None:
        """Run the phase, heartbeating; owned runs' workflows start from it (``how``: settings)."""
        client, queue = activity.client(), activity.info().task_queue
        settings = TemporalConfig(**how)

        def context(rt: RunServices, rid: str, t: TaskDefinition, i: int) -> TaskContext:
            return PhaseContext(rt, rid, t, i, client=client, task_queue=queue, config=settings)

        async with heartbeats(run_id=execution.record.run_id, call=f"task phase {index}"):
            await run_phase(execution, index, state, context=context)

    @activity.defn(name="nbdurable.task_begin")
    async def begin(self, run_id: str) -> dict[str, Any]:
        """Take a pending task run (:meth:`~nbdurable.runtime._leg_steps.TaskSteps.take_task`).

        A worker that does not serve the run's task version (or one of its
        declared agents) records the run's waiting reason (``waits for a worker
        serving digest v1``) and hands the activity back.
        """
        return await self.take_task(run_id)

    @activity.defn(name="nbdurable.task_phase")
    async def phase(self, run_id: str, index: int, fence: int, config: dict[str, Any]) -> None:
        """Run phase ``index`` and journal its state, heartbeating meanwhile.

        Failures are final (non-retryable) with the reason as type: ``timeout``,
        ``limit_exceeded``, ``error``; ``cancelled`` when the run is being
        cancelled, ``fenced`` when it is no longer this execution's.
        """
        with decisions():
            await self.task_phase(run_id, index, fence, config)

    @activity.defn(name="nbdurable.task_finish")
    async def finish(self, run_id: str, fence: int | None, changes: dict[str, Any]) -> str:
        """Write the task run's final state; the state it ends in.

        ``completed`` gets the last journaled state as its result. A run being
        cancelled ends ``cancelled`` whatever the phases did, and its unfinished
        owned runs are cancelled. A finished run, or one another execution took
        (fenced), keeps its state.
        """
        runtime = self.runtime
        record = await offload(self._record, run_id)
        patch = RunPatch(**changes)  # from the workflow's JSON: a misspelt field is a TypeError
        if record.finished or not patch:
            return record.state
        return await finish_task_run(
            runtime, record, patch, fence, task_of=self._served, read=self._record
        )


@workflow.defn(name="nbdurable.TaskRun")
class TaskRunWorkflow:
    """One custom task run: its phases as activities, from the last journaled one."""

    def __init__(self) -> None:
        self._resumes = 0

    @workflow.signal(name="resume")
    def resume(self, verdicts: dict[str, dict[str, Any]]) -> None:
        """The run is pending (submitted, retried): take it (a task has no verdicts)."""
        self._resumes += 1

    @workflow.run
    async def run(self, config: dict[str, Any]) -> str:
        """Run the phases until the task completes, fails or is cancelled; its final state."""
        settings = TemporalConfig(**config)
        fence: int | None = None
        try:
            while True:
                await workflow.wait_condition(lambda: self._resumes > 0)
                self._resumes = 0
                begun = await self._begin(settings)
                if begun["state"] in TERMINAL_STATES:
                    return str(begun["state"])
                if begun["state"] != "running":
                    continue  # not pending: a duplicate resume
                fence = int(begun["fence"])
                outcome = await self._phases(settings, fence, begun["start"], begun["phases"])
                state = await self._finish(settings, fence, outcome)
                if state in TERMINAL_STATES:
                    return state
        except asyncio.CancelledError:
            await self._finish(settings, fence, {"state": "cancelled"})
            raise

    async def _begin(self, config: TemporalConfig) -> dict[str, Any]:
        """Take the pending run (``task_begin``), on a worker that serves its task version.

        A worker that does not serve it hands ``task_begin`` back naming the
        run's ``(task, version)``, and the next attempt waits on that
        definition's queue (:class:`~nbdurable.temporal._routing.HandBacks`).
        A history recorded before that lets the server retry the hand-backs.
        """
        if not workflow.patched(TASK_DEFINITION_QUEUES):
            begun: dict[str, Any] = await workflow.execute_activity(
                "nbdurable.task_begin",
                args=[config.run_id],
                result_type=dict,
                start_to_close_timeout=timedelta(seconds=60),
                **self._begin_retries(),
            )
            return begun
        hand_backs = HandBacks(patch=None, wait=TASK_ROUTED_WAIT, every_time=True)
        # A lost worker is retried by the server; a hand-back comes back here.
        retries = RetryPolicy(
            initial_interval=handed_back_delay(0),
            maximum_interval=handed_back_delay(6),
            non_retryable_error_types=[DEFINITION_MISMATCH],
        )
        while True:
            try:
                begun = await workflow.execute_activity(
                    "nbdurable.task_begin",
                    args=[config.run_id],
                    result_type=dict,
                    start_to_close_timeout=timedelta(seconds=60),
                    retry_policy=retries,
                    **hand_backs.options(),
                )
                return begun
            except ActivityError as exc:
                if hand_backs.not_taken(exc):
                    continue
                cause = exc.cause
                if not isinstance(cause, ApplicationError) or cause.type != DEFINITION_MISMATCH:
                    raise
                await hand_backs.handed_back(cause)

    @staticmethod
    def _begin_retries() -> dict[str, Any]:
        """How ``task_begin`` is retried: a worker that lacks the task hands it back.

        The server's default policy waits up to 100 s between attempts; a run
        waiting for a worker with its task version is taken within 10 s of one
        polling.
        """
        if not workflow.patched(TASK_HAND_BACK):
            return {}
        policy = RetryPolicy(
            initial_interval=handed_back_delay(0), maximum_interval=handed_back_delay(6)
        )
        return {"retry_policy": policy}

    async def _finish(
        self, config: TemporalConfig, fence: int | None, changes: dict[str, Any]
    ) -> str:
        state = await workflow.execute_activity(
            "nbdurable.task_finish",
            args=[config.run_id, fence, changes],
            result_type=str,
            start_to_close_timeout=timedelta(seconds=60),
        )
        return str(state)

    async def _phases(
        self, config: TemporalConfig, fence: int, start: int, phases: int
    ) -> dict[str, Any]:
        """Run the phases from ``start``; the final state change (empty when fenced out)."""
        for index in range(start, phases):
            try:
                await workflow.execute_activity(
                    "nbdurable.task_phase",
                    args=[config.run_id, index, fence, asdict(config)],
                    start_to_close_timeout=PHASE_TIMEOUT,
                    heartbeat_timeout=timedelta(seconds=config.heartbeat_timeout),
                    # Only a lost worker is retried (phases fail non-retryably): a
                    # phase runs again as long as workers keep dying under it.
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(milliseconds=200),
                        maximum_interval=timedelta(seconds=10),
                    ),
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
            except ActivityError as exc:
                cause = exc.cause
                if isinstance(cause, CancelledError):
                    raise asyncio.CancelledError() from None
                if isinstance(cause, ApplicationError) and cause.type == "fenced":
                    return {}
                if isinstance(cause, ApplicationError) and cause.type == "cancelled":
                    return {"state": "cancelled"}
                kind: str | None = None
                error: str | None = str(cause or exc)
                if isinstance(cause, ApplicationError):
                    kind, error = cause.type, cause.message
                reason = kind if kind in FAILURES else "error"
                if reason == "timeout":
                    error = None
                return {"state": "failed", "reason": reason, "error": error}
        return {"state": "completed"}
