"""Custom tasks on Restate: one virtual object per task version, a journaled step per phase.

A task run is the key of its task's virtual object
(:func:`~nbdurable.restate._config.task_service`); its ``leg`` handler takes the
pending run (a fenced compare-and-set to ``running``, the ``task begin`` step),
runs each phase not yet checkpointed as a step of its own, and writes the
final state (``task finish``). A phase step runs the embedded engine's
:func:`~nbdurable.runtime._tasks.run_phase`, which checkpoints the phase's
state in the store before the step completes: an endpoint killed mid-phase
leaves the step unfinished, Restate invokes the handler again (on the endpoint
its deployment then names, :mod:`nbdurable.restate._failover`), the finished
steps replay from the journal and the cut phase runs again from the last
checkpointed state; a checkpointed phase never runs again. Owned runs a phase
spawns are agent runs: the phase sends their first leg itself (no client may be
connected). A phase may wait for a human for days, so the handler's abort
timeout is as long as Temporal's phase timeout: a lost endpoint is noticed by
its connection, not by a timer.

Like :mod:`nbdurable.temporal._tasks` (Temporal's workflow and activities),
what a step decides is a value in its answer (``failed``, ``cancelled``,
``fenced``), never an exception: Restate retries a step that raises.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from typing import Any

import restate
from restate.exceptions import TerminalError

from ..durable._offload import offload
from ..runs import RunPatch
from ..runtime import _leg_steps as bodies
from ..runtime._leg_steps import StepDecided
from ..runtime._legs_outside import finish_task_run
from ..runtime._run import Run
from ..runtime._seam import RunServices
from ..runtime._tasks import (
    TaskContext,
    TaskDefinition,
    TaskExecution,
    run_phase,
)
from ._config import RESTATE, task_service
from ._handler import ELSEWHERE, endpoint_runtime, step
from ._steps import answer

__all__ = ["CANCEL_POLL", "PHASE_ABORT", "TaskSteps", "task_leg", "task_objects"]

PHASE_ABORT = timedelta(days=365)
"""How long Restate lets a phase step run without news: a phase may await owned runs
that wait for a human (Temporal's ``PHASE_TIMEOUT``)."""
CANCEL_POLL = 0.5
"""Seconds between a running phase's looks at its run record for a cancel."""
FAILURES = ("timeout", "limit_exceeded", "error")
"""Reasons a phase fails its task with (anything else: ``error``)."""


class PhaseContext(TaskContext):
    """A phase's context on an endpoint: it sends each owned run's first leg itself."""

    def __init__(
        self, runtime: RunServices, run_id: str, task: TaskDefinition, phase_index: int
    ) -> None:
        super().__init__(runtime, run_id, task, phase_index, on_submitted=self._send)

    async def _send(self, run: Run) -> None:
        from ._engine import RestateEngine

        record = await offload(run.record)
        engine = self.runtime.engine
        if record.state == "pending" and isinstance(engine, RestateEngine):
            await engine.send(record)  # idempotent: the endpoint's dispatcher may send it too


class TaskSteps(bodies.TaskSteps):
    """The steps of a task run's handler."""

    engine = RESTATE

    async def run_phase(self, execution: TaskExecution, index: int, state: Any, how: Any) -> None:
        """Run the phase, looking at the run record for a cancel meanwhile."""
        phase = asyncio.ensure_future(run_phase(execution, index, state, context=PhaseContext))
        if await self._cancelled_during(execution.record.run_id, phase):
            raise StepDecided("cancelled", "the task is being cancelled")

    async def phase_answer(self, run_id: str, index: int, fence: int) -> dict[str, Any]:
        """Run phase ``index``: ``{}`` when done, else the decision (``failed``, ...)."""
        try:
            await self.task_phase(run_id, index, fence)
        except StepDecided as decided:
            return answer(decided)
        return {}

    async def _cancelled_during(self, run_id: str, phase: asyncio.Future[Any]) -> bool:
        """Await ``phase``; True (and the phase cancelled) once the run is being cancelled.

        The store is the one place a cancel is said, as a Temporal activity learns
        of one from its heartbeat. Restate's own cancel is not sent to a task's
        invocation: a second one (the client's and an endpoint's dispatcher both
        send them) could cut the final step between its two writes.
        """
        try:
            while True:
                done, _ = await asyncio.wait({phase}, timeout=CANCEL_POLL)
                if done:
                    phase.result()  # the phase's own error, if any
                    return False
                record = await offload(self._record, run_id)
                if record.state == "cancelling":
                    return True
        finally:
            if not phase.done():
                phase.cancel()
                with contextlib.suppress(BaseException):
                    await phase

    async def finish(self, run_id: str, fence: int, changes: dict[str, Any]) -> str:
        """Write the task run's final state; the state it ends in.

        ``completed`` gets the last checkpointed state as its result. A run being
        cancelled ends ``cancelled`` whatever the phases did, and its unfinished
        owned runs are cancelled. A finished run, or one another execution took
        (fenced), keeps its state.
        """
        runtime = self.runtime
        record = await offload(self._record, run_id)
        patch = RunPatch(**changes)
        if record.finished or not patch:
            if record.state == "cancelled":  # this step again, after a cut: finish its work
                await runtime.cancel_owned(run_id)
            return record.state
        return await finish_task_run(
            runtime, record, patch, fence, task_of=self._task, read=self._record
        )


def _changes(answer: dict[str, Any]) -> dict[str, Any] | None:
    """What a phase's answer means for the run: None (go on) or its final state change."""
    if "cancelled" in answer:
        return {"state": "cancelled"}
    if "fenced" in answer:
        return {}
    if "failed" in answer:
        kind, error = answer["failed"]
        reason = kind if kind in FAILURES else "error"
        return {
            "state": "failed",
            "reason": reason,
            "error": None if reason == "timeout" else error,
        }
    return None


async def task_leg(ctx: restate.ObjectContext, config: dict[str, Any]) -> str | None:
    """Run the task run ``ctx.key()`` from its last checkpointed phase; its state after.

    ``config`` is what every leg's invocation carries (a task uses none of it).
    """
    run_id = ctx.key()
    steps = TaskSteps(endpoint_runtime())
    begun = await step(ctx, run_id, "task begin", lambda: steps.take_task(run_id))
    if "elsewhere" in begun:
        return ELSEWHERE
    if begun["state"] != "running":
        return str(begun["state"])
    fence = int(begun["fence"])
    changes: dict[str, Any] = {"state": "completed"}
    try:
        for index in range(int(begun["start"]), int(begun["phases"])):

            async def body(i: int = index) -> dict[str, Any]:
                return await steps.phase_answer(run_id, i, fence)

            ended = _changes(await step(ctx, run_id, f"task phase {index}", body))
            if ended is not None:
                changes = ended
                break
    except TerminalError as exc:
        if exc.status_code != 409:  # not a cancellation: Restate fails the invocation
            raise
        changes = {"state": "cancelled"}

    async def finish() -> str:
        return await steps.finish(run_id, fence, changes)

    return str(await step(ctx, run_id, "task finish", finish))


def task_objects(runtime: RunServices) -> list[restate.VirtualObject]:
    """The virtual objects of an endpoint executing ``runtime``'s tasks: one per task version."""
    objects = []
    for name, version in sorted(runtime.task_keys()):
        obj = restate.VirtualObject(task_service(name, version))
        obj.handler("leg", abort_timeout=PHASE_ABORT)(task_leg)
        objects.append(obj)
    return objects
