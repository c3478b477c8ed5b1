"""The run's workflow: the same pure step machine, its effects turned into activities.

The workflow holds no I/O: the machine runs inside it (deterministic by
construction), model and tool calls are activities, stream parts and
checkpoints are mirrored into the nbdurable store by local activities (see
:mod:`nbdurable.temporal._driver`). A leg ends completed, waiting for approvals
or needing attention; a parked workflow waits for the ``resume`` signal, which
carries the verdicts. Approved calls run only after the machine verified their
tokens with the worker's ``ApprovalSigner``. A run's ``timeout`` is a workflow
timer around each leg; ``max_operations`` and ``max_payload_bytes`` are the
worker runtime's limits, checked as on the embedded engine.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import asdict
from typing import Any

from temporalio import workflow
from temporalio.workflow import ContinueAsNewVersioningBehavior

from .._deps import Deps
from .._errors import DurableConflictError, LimitExceededError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._stored import validate_stored
from ..loop._machine import LegStart, leg_start_from_checkpoint
from ..messages import Message, ToolApprovalResponse
from ..runs import TERMINAL_STATES, RuntimeRun, definition_matches, mismatch_reason
from ..runtime._legs import leg_options
from ..runtime._outcome import LegEnded, LegOutcome, ended_by, leg_result, record_changes
from ._config import TemporalConfig
from ._driver import LOCAL_ACTIVITY, WorkflowDriver
from ._registry import worker_runtime

__all__ = ["AgentRunWorkflow", "DefinitionMismatchError"]

RESUME_AFTER_END = "nbdurable-resume-after-end"
"""Patch: a resume received while a leg ended in a final state runs the next leg."""
ELSEWHERE = "elsewhere"
"""What a leg returns when this worker's definition of the run's agent is not the submitted one."""


class DefinitionMismatchError(DurableConflictError):
    """A worker must not go on with a run: its definition differs from the submitted one.

    Raised in workflow code, it fails the workflow task (not the workflow), which
    Temporal retries, possibly on another worker.
    """


class _WorkflowClock:
    """Workflow time, epoch ms (deterministic on replay)."""

    def now(self) -> int:
        return int(workflow.time() * 1000)


@workflow.defn(name="nbdurable.AgentRun")
class AgentRunWorkflow:
    """One nbdurable run: legs of the step machine, parked between them."""

    def __init__(self) -> None:
        self._resumes = 0
        self._verdicts: dict[str, dict[str, Any]] = {}
        self._outbox: list[dict[str, Any]] = []
        self._driver: WorkflowDriver | None = None  # the leg's, for what it still carries

    @workflow.signal(name="resume")
    def resume(self, verdicts: dict[str, dict[str, Any]]) -> None:
        """The run is pending again (submitted, answered, retried): run a leg."""
        self._verdicts.update(verdicts)
        self._resumes += 1

    @workflow.run
    async def run(self, config: dict[str, Any], carried: dict[str, Any] | None = None) -> str:
        """Run legs until the run completes, fails or is cancelled; its final state.

        ``carried``: what a run continued as new hands on (a leg to start, the
        verdicts received, how many times a worker left the run to another).
        """
        settings = TemporalConfig(**config)
        handed_back = 0
        if carried:
            self._verdicts.update(carried.get("verdicts") or {})
            self._resumes += 1
            handed_back = int(carried.get("handed_back", 0))
        try:
            while True:
                await workflow.wait_condition(lambda: self._resumes > 0)
                self._resumes = 0
                state = await self._leg(settings)
                if state == ELSEWHERE:
                    await self._hand_on(config, handed_back)
                if state in TERMINAL_STATES:
                    # A retry's resume that reached this workflow while its last leg
                    # ended is the next leg's start, not a signal to drop.
                    if self._resumes > 0 and workflow.patched(RESUME_AFTER_END):
                        continue
                    return state
        except asyncio.CancelledError:
            await self._finish(settings, LegOutcome.cancelled())
            raise

    async def _hand_on(self, config: dict[str, Any], handed_back: int) -> None:
        """Leave the run to a worker with its definition: wait, then continue as new.

        A workflow's tasks stick to the worker that ran it last; the first task
        of a run continued as new goes to the task queue, where any worker may
        take it. The wait (1 s doubling to 10 s, cut short by a resume signal)
        bounds the churn while no worker with the definition polls the queue.
        A versioned worker's run (pinned to its version) continues on the
        deployment's current version: a new release's, once one polls.
        """
        delay = min(2**handed_back, 10)
        with contextlib.suppress(asyncio.TimeoutError):
            await workflow.wait_condition(lambda: self._resumes > 0, timeout=delay)
        carried = {"verdicts": self._verdicts, "handed_back": handed_back + 1}
        upgrade: dict[str, Any] = {}
        if getattr(worker_runtime().engine, "version", None) is not None:
            upgrade["initial_versioning_behavior"] = ContinueAsNewVersioningBehavior.AUTO_UPGRADE
        workflow.continue_as_new(args=[config, carried], **upgrade)

    async def _finish(
        self, config: TemporalConfig, outcome: LegOutcome, fence: int | None = None
    ) -> str | None:
        """Write what the leg left in the outbox and the run's new state; the state.

        ``fence``: the leg's claim. A local activity runs again when its workflow
        task is retried (a signal arriving as it completes); the claim keeps the
        second run from overwriting what happened to the run since.
        """
        entries, self._outbox[:] = list(self._outbox), []
        if self._driver is not None:
            # Completed intents no later model_step took along: written with the leg's end.
            entries += [{"log": config.run_id, "intent": i} for i in self._driver.completed]
            self._driver.completed = []
        changes = record_changes(outcome).changes()  # JSON for the activity
        args: list[Any] = [config.run_id, entries, changes]
        if fence is not None:
            args.append(fence)
        await workflow.execute_local_activity("nbdurable.finish_leg", args=args, **LOCAL_ACTIVITY)
        return outcome.state

    async def _leg(self, config: TemporalConfig) -> str | None:
        info = await workflow.execute_local_activity(
            "nbdurable.begin_leg", args=[config.run_id], result_type=dict, **LOCAL_ACTIVITY
        )
        if not info:
            return None  # a duplicate resume: the run is not pending
        if info.get("final"):
            return str(info["final"])  # finished already, or its deadline had passed
        if info.get("elsewhere"):
            return ELSEWHERE  # this worker's definition is not the submitted one
        runtime = worker_runtime()
        record = validate_stored(RuntimeRun, info["record"])
        agent = runtime.registry.get(record.agent_id, record.agent_version)
        if agent is None:
            error = f"this worker serves no agent {record.agent_id!r} v{record.agent_version}"
            return await self._finish(config, LegOutcome.failed("error", error))
        definitions = runtime.registry.definitions()
        if definition_matches(record, definitions) is False:
            # Replayed here after the leg began on a worker with the run's definition:
            # failing this workflow task makes Temporal retry it, on another worker.
            raise DefinitionMismatchError(mismatch_reason(record, definitions))
        if info["checkpoint"] is not None:
            start = leg_start_from_checkpoint(AgentCheckpoint.model_validate(info["checkpoint"]))
        else:
            messages = tuple(Message.model_validate(m) for m in info["messages"])
            start = LegStart(messages=messages, run_id=config.run_id, durable=True)
        # the store's record is the arbiter (one verdict per approval): a signal
        # carries a copy of it and never overrides it
        verdicts = {**self._verdicts, **record.verdicts}
        options = leg_options(
            agent,
            record,
            approval_responses=[ToolApprovalResponse.model_validate(v) for v in verdicts.values()],
            approval_signer=runtime.signer,
            deps=Deps(clock=_WorkflowClock(), generate_id=lambda: workflow.uuid4().hex),
        )
        driver = WorkflowDriver(
            options,
            start,
            leg=config,
            run_id=config.run_id,
            agent=agent,
            limits=runtime.limits,
            outbox=self._outbox,
            log=config.run_id,
        )
        self._driver = driver
        deadline = record.deadline_at
        try:
            if deadline is None:
                result = await driver.run()
            else:
                left = max(deadline - _WorkflowClock().now(), 0) / 1000
                result = await asyncio.wait_for(driver.run(), left)
        except TimeoutError:
            return await self._finish(config, LegOutcome.timed_out(), record.fence)
        except (LegEnded, LimitExceededError) as exc:
            ended = ended_by(exc)
            assert ended is not None  # both decide the run's outcome
            return await self._finish(config, ended, record.fence)
        self._verdicts.clear()
        return await self._finish(config, leg_result(result), record.fence)


def config_args(config: TemporalConfig) -> dict[str, Any]:
    """The workflow's argument for ``config``."""
    return asdict(config)
