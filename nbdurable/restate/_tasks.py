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

from .._errors import FencedOutError, LimitExceededError
from ..durable._offload import offload
from ..runs import RunPatch, RuntimeRun, unserved_reason
from ..runtime import _lifecycle as lifecycle
from ..runtime._leg_steps import BoundSteps
from ..runtime._legs_outside import finish_task_run, note_task_waiting
from ..runtime._outcome import RunTimedOut
from ..runtime._run import Run
from ..runtime._seam import RunServices
from ..runtime._state_events import claim_event
from ..runtime._tasks import (
    TaskContext,
    TaskDefinition,
    TaskExecution,
    resume_point,
    run_phase,
)
from ._config import RESTATE, task_service
from ._handler import ELSEWHERE, endpoint_runtime, step

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


class TaskSteps(BoundSteps):
    """The steps of a task run's handler."""

    engine = RESTATE

    def _task(self, record: RuntimeRun) -> TaskDefinition | None:
        """The run's task, when this endpoint executes its version now."""
        task = self.runtime.tasks.get(record.agent_id)
        if (record.agent_id, record.agent_version) not in self.runtime.task_keys():
            return None
        return task

    def _wait_elsewhere(self, record: RuntimeRun) -> str:
        """Record why a pending task run waits (once, fenced); the reason."""
        note_task_waiting(self.runtime, record, RESTATE)
        return unserved_reason(record)

    async def begin(self, run_id: str) -> dict[str, Any]:
        """Take a pending task run (a fenced compare-and-set to running).

        Returns the run's state (``running`` only when taken now) and, when
        taken, its fence, its number of phases and the first phase to run;
        ``{"elsewhere": reason}`` when this endpoint does not execute the task's
        version. A run past its deadline fails (``timeout``).
        """
        runtime = self.runtime
        record = await offload(self._record, run_id)
        if record.state != "pending":
            return {"state": record.state}  # a duplicate invocation: another decision stands
        task = self._task(record)
        claim = RunPatch(fence=record.fence + 1, lease_owner=self.owner(run_id))
        if record.deadline_at is not None and runtime.now() >= record.deadline_at:
            claim |= RunPatch(state="failed", reason="timeout", lease_owner=None)
        elif task is None:
            return {"elsewhere": await offload(self._wait_elsewhere, record)}
        else:
            claim |= RunPatch(state="running", waiting_reason=None)
        claim |= RunPatch(updated_at=runtime.now())
        record = await offload(runtime.runtime_store.rt_update, run_id, claim, fence=record.fence)
        await offload(claim_event, runtime, record)
        if record.state != "running" or task is None:
            lifecycle.left(record, record.state, record.reason)
            return {"state": record.state}
        lifecycle.claimed(record, resumed=record.phase > 0)
        start, _ = await offload(resume_point, TaskExecution(runtime, task, record))
        return {
            "state": "running",
            "fence": record.fence,
            "start": start,
            "phases": len(task.phases),
        }

    async def phase(self, run_id: str, index: int, fence: int) -> dict[str, Any]:
        """Run phase ``index`` and checkpoint its state; ``{}`` when done.

        A phase checkpointed already (its endpoint died before the step was
        journaled) is not run again; it is cut at the task's deadline. Else
        ``{"failed": [reason, message]}`` (``timeout``, ``limit_exceeded``,
        ``error``), ``{"cancelled": True}`` (the run is being cancelled) or
        ``{"fenced": message}`` (the run is no longer this execution's).
        """
        runtime = self.runtime
        record = await offload(self._record, run_id)
        task = self._task(record)
        if record.state == "cancelling":
            return {"cancelled": True}
        if record.fence != fence or record.state != "running":
            return {"fenced": f"task run {run_id!r} is {record.state} (fence {record.fence})"}
        if task is None:  # replayed on an endpoint that lost the task since: fail it plainly
            return {"failed": ["error", unserved_reason(record)]}
        execution = TaskExecution(runtime, task, record)
        start, state = await offload(resume_point, execution)
        if start > index:
            return {}
        if start < index:
            return {"failed": ["error", f"phase {index} of {run_id!r} cannot run before {start}"]}
        deadline = record.deadline_at
        delay = None if deadline is None else max(deadline - runtime.now(), 0) / 1000
        cut = asyncio.timeout(delay)
        try:
            async with cut:
                phase = asyncio.ensure_future(
                    run_phase(execution, index, state, context=PhaseContext)
                )
                if await self._cancelled_during(run_id, phase):
                    return {"cancelled": True}
        except RunTimedOut as exc:
            return {"failed": ["timeout", str(exc)]}
        except LimitExceededError as exc:
            return {"failed": ["limit_exceeded", str(exc)]}
        except FencedOutError as exc:
            return {"fenced": str(exc)}
        except Exception as exc:
            if cut.expired():
                return {"failed": ["timeout", "the task's timeout passed"]}
            return {"failed": ["error", f"{type(exc).__name__}: {exc}"]}
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
    begun = await step(ctx, run_id, "task begin", lambda: steps.begin(run_id))
    if "elsewhere" in begun:
        return ELSEWHERE
    if begun["state"] != "running":
        return str(begun["state"])
    fence = int(begun["fence"])
    changes: dict[str, Any] = {"state": "completed"}
    try:
        for index in range(int(begun["start"]), int(begun["phases"])):

            async def body(i: int = index) -> dict[str, Any]:
                return await steps.phase(run_id, i, fence)

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
