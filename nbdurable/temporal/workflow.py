"""The run's workflow: the same pure step machine, its effects turned into activities.

The workflow holds no I/O: the machine runs inside it (deterministic by
construction), model and tool calls are activities, stream parts and
checkpoints are mirrored into the nbdurable store by activities. A leg ends
completed, waiting for approvals or needing attention; a parked workflow waits
for the ``resume`` signal, which carries the verdicts. Approved calls run only
after the machine verified their tokens with the worker's ``ApprovalSigner``.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from .._deps import Deps
from ..durable.checkpoint import AgentCheckpoint
from ..loop.driver import Driver, build_options
from ..loop.machine import (
    CallModel,
    Effect,
    ExecuteTools,
    LegStart,
    SaveCheckpoint,
    ToolInvocation,
    ToolOutcome,
    leg_start_from_checkpoint,
)
from ..messages import Message, ToolApprovalResponse, ToolResultPart
from ..models.base import ModelResponse
from ..parts import StreamPart
from ..runtime.agent import Agent
from .activities import NEEDS_ATTENTION
from .config import TemporalConfig
from .registry import worker_runtime

__all__ = ["AgentRunWorkflow"]

FINAL_STATES = ("completed", "failed", "cancelled")


class _WorkflowClock:
    """Workflow time, epoch ms (deterministic on replay)."""

    def now(self) -> int:
        return int(workflow.time() * 1000)


class _ModelFailed(Exception):
    def __init__(self, reason: str, error: str) -> None:
        self.reason = reason
        self.error = error
        super().__init__(error)


class _ToolNeedsAttention(Exception):
    pass


def _cause(error: ActivityError) -> ApplicationError | None:
    """The application error behind ``error``; a cancelled activity cancels the workflow."""
    cause = error.cause
    if isinstance(cause, CancelledError):
        # the workflow was cancelled while the activity ran: the run ends cancelled,
        # not in needs_attention or failed
        raise asyncio.CancelledError() from None
    return cause if isinstance(cause, ApplicationError) else None


class WorkflowDriver(Driver):
    """The loop's driver inside a workflow: every effect with I/O becomes an activity."""

    def __init__(self, *args: Any, config: TemporalConfig, agent: Agent, **kwargs: Any) -> None:
        self.parts: list[StreamPart] = []
        super().__init__(*args, emit=self.parts.append, **kwargs)
        self.config = config
        self.agent = agent

    @property
    def run_id(self) -> str:
        """The run."""
        return self.config.run_id

    def take_parts(self) -> list[dict[str, Any]]:
        """The buffered stream parts as JSON (the buffer empties)."""
        parts, self.parts[:] = list(self.parts), []
        return [part.model_dump(mode="json") for part in parts]

    async def flush(self) -> None:
        """Mirror buffered parts into the store's event log now."""
        if self.parts:
            await workflow.execute_activity(
                "nbdurable.mirror",
                args=[self.run_id, self.take_parts(), None],
                start_to_close_timeout=timedelta(seconds=60),
            )

    async def handle(self, effect: Effect) -> Any:
        """Flush events before anything slow, so viewers see the calls while they run."""
        if isinstance(effect, (CallModel, ExecuteTools)):
            await self.flush()
        return await super().handle(effect)

    async def _save(self, effect: SaveCheckpoint) -> None:
        await workflow.execute_activity(
            "nbdurable.mirror",
            args=[self.run_id, self.take_parts(), effect.checkpoint.model_dump(mode="json")],
            start_to_close_timeout=timedelta(seconds=60),
        )

    async def _call_model(self, effect: CallModel) -> ModelResponse:
        retry = self.agent.retry_policy
        policy = RetryPolicy(maximum_attempts=1)
        if retry is not None:
            policy = RetryPolicy(
                initial_interval=timedelta(milliseconds=retry.initial_delay_ms),
                backoff_coefficient=2.0,
                maximum_interval=timedelta(milliseconds=retry.max_delay_ms),
                maximum_attempts=retry.max_attempts,
            )
        try:
            text = await workflow.execute_activity(
                "nbdurable.call_model",
                args=[self.run_id, effect.step_index, effect.request.model_dump(mode="json")],
                result_type=str,
                start_to_close_timeout=timedelta(seconds=self.config.model_timeout),
                heartbeat_timeout=timedelta(seconds=self.config.heartbeat_timeout),
                retry_policy=policy,
            )
        except ActivityError as exc:
            cause = _cause(exc)
            reason = cause.type if cause is not None and cause.type else "model_error"
            if reason == "model_attempt_failed":
                reason = "model_retries_exhausted"
            message = cause.message if cause is not None else str(exc)
            raise _ModelFailed(reason, message) from None
        return ModelResponse.model_validate_json(text)

    async def _run_tool(self, invocation: ToolInvocation, step_index: int) -> ToolOutcome:
        recovery = self.agent.recovery_of(invocation.call.tool_name)
        attempts = 1 if recovery == "manual" else max(self.config.tool_retries, 1)
        try:
            data = await workflow.execute_activity(
                "nbdurable.run_tool",
                args=[self.run_id, step_index, invocation.call.model_dump(mode="json")],
                result_type=dict,
                start_to_close_timeout=timedelta(seconds=self.config.tool_timeout),
                heartbeat_timeout=timedelta(seconds=self.config.heartbeat_timeout),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(milliseconds=200), maximum_attempts=attempts
                ),
            )
        except ActivityError as exc:
            cause = _cause(exc)
            if cause is not None and cause.type == NEEDS_ATTENTION:
                raise _ToolNeedsAttention(cause.message) from None
            call = invocation.call
            raise _ToolNeedsAttention(
                f"tool {call.tool_name!r} (call {call.tool_call_id}) was interrupted "
                f"({recovery} recovery): retry() runs it again, deny() settles it"
            ) from None
        return ToolOutcome(result=ToolResultPart.model_validate(data))


@workflow.defn(name="nbdurable.AgentRun")
class AgentRunWorkflow:
    """One nbdurable run: legs of the step machine, parked between them."""

    def __init__(self) -> None:
        self._resumes = 0
        self._verdicts: dict[str, dict[str, Any]] = {}

    @workflow.signal(name="resume")
    def resume(self, verdicts: dict[str, dict[str, Any]]) -> None:
        """The run is pending again (submitted, answered, retried): run a leg."""
        self._verdicts.update(verdicts)
        self._resumes += 1

    @workflow.run
    async def run(self, config: dict[str, Any]) -> str:
        """Run legs until the run completes, fails or is cancelled; its final state."""
        settings = TemporalConfig(**config)
        try:
            while True:
                await workflow.wait_condition(lambda: self._resumes > 0)
                self._resumes = 0
                state = await self._leg(settings)
                if state in FINAL_STATES:
                    return state
        except asyncio.CancelledError:
            await self._finish(settings, [], {"state": "cancelled", "reason": "cancelled"})
            raise

    async def _finish(
        self, config: TemporalConfig, parts: list[dict[str, Any]], changes: dict[str, Any]
    ) -> None:
        await workflow.execute_activity(
            "nbdurable.finish_leg",
            args=[config.run_id, parts, changes],
            start_to_close_timeout=timedelta(seconds=60),
        )

    async def _leg(self, config: TemporalConfig) -> str | None:
        info = await workflow.execute_activity(
            "nbdurable.begin_leg",
            args=[config.run_id],
            result_type=dict,
            start_to_close_timeout=timedelta(seconds=60),
        )
        if not info:
            return None
        runtime = worker_runtime()
        record = info["record"]
        agent = runtime.registry.get(record["agent_id"], record["agent_version"])
        if agent is None:
            await self._finish(
                config, [], {"state": "failed", "reason": "error", "error": "agent not served"}
            )
            return "failed"
        if info["checkpoint"] is not None:
            start = leg_start_from_checkpoint(AgentCheckpoint.model_validate(info["checkpoint"]))
        else:
            messages = tuple(Message.model_validate(m) for m in info["messages"])
            start = LegStart(messages=messages, run_id=config.run_id, durable=True)
        verdicts = {**record["verdicts"], **self._verdicts}
        options = build_options(
            model=agent.model,
            tools=agent.tool_map,
            instructions=agent.instructions,
            max_steps=record["max_steps"],
            stop_when=None,
            prepare_step=None,
            max_tool_concurrency=agent.max_tool_concurrency,
            approve_tool_call=None,
            approval_responses=[ToolApprovalResponse.model_validate(v) for v in verdicts.values()],
            approval_signer=runtime.signer,
            approval_max_age_ms=None,
            deps=Deps(clock=_WorkflowClock(), generate_id=lambda: workflow.uuid4().hex),
            output_type=agent.output_type,
        )
        driver = WorkflowDriver(options, start, config=config, agent=agent)
        try:
            result = await driver.run()
        except _ModelFailed as failed:
            failure = {"state": "failed", "reason": failed.reason, "error": failed.error}
            await self._finish(config, driver.take_parts(), failure)
            return "failed"
        except _ToolNeedsAttention as exc:
            attention = {"state": "needs_attention", "reason": str(exc)}
            await self._finish(config, driver.take_parts(), attention)
            return "needs_attention"
        self._verdicts.clear()
        parts = driver.take_parts()
        changes: dict[str, Any]
        if result.status == "completed":
            changes = {
                "state": "completed",
                "result_text": result.text,
                "verdicts": {},
                "rerun_tool_calls": [],
                "model_attempts": 0,
                "error": None,
            }
        elif result.pending_approvals:
            changes = {"state": "waiting_approval", "verdicts": {}, "rerun_tool_calls": []}
        else:
            changes = {
                "state": "needs_attention",
                "verdicts": {},
                "reason": "the run waits for a client tool's result",
            }
        await self._finish(config, parts, changes)
        return str(changes["state"])


def config_args(config: TemporalConfig) -> dict[str, Any]:
    """The workflow's argument for ``config``."""
    return asdict(config)
