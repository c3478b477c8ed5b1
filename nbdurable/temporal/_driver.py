"""The loop's driver inside a workflow: every effect with I/O becomes an activity.

Stream parts and checkpoints collect in an *outbox* (ordered, tagged with the
event log they belong to) that a local activity writes to the store right
before the next model or tool activity and at the end of a leg, and viewers
still see a step's parts before its slow work starts. The run's own model call
is the ``model_step`` activity, which also runs the step's calls that need no
human (:mod:`nbdurable.temporal._prefetch`): such a step is one round trip
through the server. Sub-agents (``agent_tool``) run
inside the same workflow as child drivers sharing the outbox; their model and
tool calls are activities too, their checkpoints and events go under the
child's key, exactly as the embedded engine writes them.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from ..loop._effects import CallModel, ToolInvocation, ToolOutcome
from ..loop._subagent import AgentTool
from ..messages import ToolCallPart, ToolResultPart
from ..models._base import ModelResponse
from ..runtime._leg_steps import NEEDS_ATTENTION
from ..runtime._outbox_driver import OutboxDriver, SubAgentFailed
from ..runtime._outcome import LegFailed, NeedsAttention
from ._config import TemporalConfig
from ._routing import HandBacks

__all__ = [
    "DEFINITION_MISMATCH",
    "LIMIT_EXCEEDED",
    "LOCAL_ACTIVITY",
    "MODEL_ATTEMPT_FAILED",
    "ONE_ACTIVITY_PER_STEP",
    "TIMEOUT",
    "WorkflowDriver",
]

MODEL_ATTEMPT_FAILED = "model_attempt_failed"
"""ApplicationError type of a model attempt the run's policy retries (details: delay ms)."""
LIMIT_EXCEEDED = "limit_exceeded"
"""ApplicationError type of a call over ``max_operations`` or ``max_payload_bytes``."""
TIMEOUT = "timeout"
"""ApplicationError type of a call after the run's deadline."""
DEFINITION_MISMATCH = "definition_mismatch"
"""ApplicationError type of an activity a worker refused before doing anything: its
definition of the run's agent differs from the one the run was submitted under."""

ONE_ACTIVITY_PER_STEP = "nbdurable-one-activity-per-step"
"""Patch: the run's model call and its step's unattended calls are one activity."""

# Local activities write the store in the workflow's own worker; a retry after a
# transient store error is cheap, a lost mirror is not.
LOCAL_ACTIVITY: dict[str, Any] = {
    "start_to_close_timeout": timedelta(seconds=60),
    "retry_policy": RetryPolicy(maximum_attempts=5),
}


def _cause(error: ActivityError) -> ApplicationError | None:
    """The application error behind ``error``; a cancelled activity cancels the caller."""
    cause = error.cause
    if isinstance(cause, CancelledError):
        # the workflow was cancelled (or timed out) while the activity ran: the
        # run ends cancelled or timed out, not in needs_attention or failed
        raise asyncio.CancelledError() from None
    return cause if isinstance(cause, ApplicationError) else None


async def write_outbox(outbox: list[dict[str, Any]]) -> None:
    """Mirror the outbox into the store now (a local activity) and empty it."""
    if outbox:
        entries, outbox[:] = list(outbox), []
        await workflow.execute_local_activity("nbdurable.mirror", args=[entries], **LOCAL_ACTIVITY)


class WorkflowDriver(OutboxDriver[TemporalConfig]):
    """Drives one agent loop (the run's, or a sub-agent's) with activities.

    Its ``leg`` is the run's workflow settings; the arguments are :class:`OutboxDriver`'s.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config = self.leg
        # Results of this step's calls that ran in the model's activity, by call id.
        self.ran_early: dict[str, dict[str, Any]] = {}
        # Their completed intents, written by the next model_step's first commit (or
        # at the leg's end): the activity that ran them need not write them on its own.
        self.completed: list[dict[str, Any]] = []
        # Set once a model call of this leg was answered: the journal lacks later steps.
        self.journal_lacks = False

    def trace_agent_name(self) -> str | None:
        """The run's loop is named after its agent (the step metric's label)."""
        return super().trace_agent_name() if self.path else self.agent.id

    def observe_step(self, seconds: float) -> None:
        """Observe the step once: not again when a worker replays the workflow's history."""
        if not workflow.unsafe.is_replaying():
            super().observe_step(seconds)

    async def call_model(self, effect: CallModel) -> ModelResponse:
        """The model call as an activity (after the outbox is written).

        The run's own call is ``nbdurable.model_step``: the step's calls that
        ran in it are kept for :meth:`run_tool`. A sub-agent's call (and any
        call of a workflow that started before that) is ``nbdurable.call_model``.

        A failed attempt the run's policy retries is scheduled again after its
        delay; an activity a worker handed back, after a backoff.

        Raises:
            LegFailed: The model's error ends the run (or a limit, or the timeout).
            asyncio.CancelledError: The workflow was cancelled while the activity ran.
        """
        hand_backs = HandBacks()
        # The run's own model calls run the step's unattended calls in the same
        # activity; a history recorded before that keeps one activity per call.
        one_activity = not self.path and workflow.patched(ONE_ACTIVITY_PER_STEP)
        name = "nbdurable.model_step" if one_activity else "nbdurable.call_model"
        timeout = self.config.model_timeout + (self.config.tool_timeout if one_activity else 0)
        while True:
            await write_outbox(self.outbox)
            scope = self.scope
            if one_activity:
                # An activity worker of this version writes these completed intents with
                # its first commit and leaves the ones it completes to the next step's
                # (``carries``), and skips the journal's read when the leg's journal
                # lacks the step (``journal``); an older one ignores these keys.
                scope = {**scope, "carries": True, "completed": list(self.completed)}
                if self.journal_lacks:
                    scope["journal"] = False
            try:
                value = await workflow.execute_activity(
                    name,
                    args=[scope, effect.step_index, effect.request.model_dump(mode="json")],
                    result_type=dict if one_activity else str,
                    start_to_close_timeout=timedelta(seconds=timeout),
                    heartbeat_timeout=timedelta(seconds=self.config.heartbeat_timeout),
                    # Only a lost worker is retried here; model errors are decided by
                    # the activity (the run's policy) and retried below.
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(milliseconds=200), maximum_attempts=10
                    ),
                    **hand_backs.options(),
                )
            except ActivityError as exc:
                if hand_backs.not_taken(exc):
                    continue
                cause = _cause(exc)
                if cause is not None and cause.type == MODEL_ATTEMPT_FAILED:
                    delay_ms = int(cause.details[0]) if cause.details else 1000
                    await workflow.sleep(timedelta(milliseconds=delay_ms))
                    continue
                if cause is not None and cause.type == DEFINITION_MISMATCH:
                    await hand_backs.handed_back(cause)
                    continue
                reason = cause.type if cause is not None and cause.type else "model_error"
                message = cause.message if cause is not None else str(exc)
                if self.path and reason not in (LIMIT_EXCEEDED, TIMEOUT):
                    raise SubAgentFailed(message) from None  # the parent model gets is_error
                raise LegFailed(reason, message) from None
            if not one_activity:
                return ModelResponse.model_validate_json(value)
            self.journal_lacks = self.journal_lacks or bool(value.get("answered"))
            # The ones carried are written; the calls that ran in it are carried on.
            self.completed = [
                {
                    "run_id": self.run_id,
                    "tool_call_id": call_id,
                    "tool_name": result["tool_name"],
                    "step_index": effect.step_index,
                    "state": "completed",
                    "result": result,
                }
                for call_id, result in value["results"].items()
            ]
            self.ran_early.update(value["results"])
            return ModelResponse.model_validate_json(value["response"])

    async def run_tool(self, invocation: ToolInvocation, step_index: int) -> ToolOutcome:
        """The call as the ``nbdurable.run_tool`` activity; a sub-agent runs in this workflow.

        Raises:
            LegFailed: A limit, the timeout or a non-retryable error ends the run.
            ToolNeedsAttention: An interrupted call needs a human (retry or deny).
            asyncio.CancelledError: The workflow was cancelled while the activity ran.
        """
        tool = invocation.tool
        call = invocation.call
        if isinstance(tool, AgentTool):
            return await self.run_agent_tool(tool, invocation)
        early = self.ran_early.pop(call.tool_call_id, None)
        if early is not None:  # it ran in the activity that called the model
            return ToolOutcome(result=ToolResultPart.model_validate(early))
        await write_outbox(self.outbox)  # viewers see the calls while the tools run
        # A sub-agent's tools have no policy of their own: the parent's policy for
        # the sub-agent call covers everything it does.
        recovery = self.agent.recovery_of(self.path[0] if self.path else call.tool_name)
        attempts = 1 if recovery == "manual" else max(self.config.tool_retries, 1)
        hand_backs = HandBacks()
        while True:
            try:
                data = await workflow.execute_activity(
                    "nbdurable.run_tool",
                    args=[self.scope, step_index, call.model_dump(mode="json")],
                    result_type=dict,
                    start_to_close_timeout=timedelta(seconds=self.config.tool_timeout),
                    heartbeat_timeout=timedelta(seconds=self.config.heartbeat_timeout),
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(milliseconds=200), maximum_attempts=attempts
                    ),
                    **hand_backs.options(),
                )
                break
            except ActivityError as exc:
                if hand_backs.not_taken(exc):
                    continue
                cause = _cause(exc)
                if cause is None or cause.type != DEFINITION_MISMATCH:
                    self._tool_failed(cause, call, recovery)
                await hand_backs.handed_back(cause)  # nothing ran: ask again
        return ToolOutcome(result=ToolResultPart.model_validate(data))

    @staticmethod
    def _tool_failed(cause: ApplicationError | None, call: ToolCallPart, recovery: str) -> NoReturn:
        """Raise what a failed tool activity means for the run."""
        if cause is not None and cause.type in (LIMIT_EXCEEDED, TIMEOUT):
            raise LegFailed(cause.type, cause.message) from None
        if cause is not None and cause.type == NEEDS_ATTENTION:
            raise NeedsAttention(cause.message) from None
        if cause is not None and cause.non_retryable:
            raise LegFailed("error", cause.message) from None
        raise NeedsAttention(
            f"tool {call.tool_name!r} (call {call.tool_call_id}) was interrupted "
            f"({recovery} recovery): retry() runs it again, deny() settles it"
        ) from None

    async def begin_child(self, log: str) -> dict[str, Any] | None:
        """The ``nbdurable.begin_child`` local activity, after the outbox is written."""
        await write_outbox(self.outbox)
        saved = await workflow.execute_local_activity(
            "nbdurable.begin_child",
            args=[self.config.run_id, log],
            result_type=dict,
            **LOCAL_ACTIVITY,
        )
        checkpoint: dict[str, Any] | None = saved.get("checkpoint")
        return checkpoint
