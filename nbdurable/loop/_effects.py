"""The effects the step machine yields, and what a driver sends back for each.

An effect is a request for I/O: the machine yields it and is sent its answer.
Every driver (the local one behind ``generate_text``, the embedded runtime's,
the Temporal workflow's) answers the same effects; see :class:`~nbdurable.loop.Driver`
for the hooks that perform them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

from ..durable._checkpoint import AgentCheckpoint
from ..messages import Message, ToolApprovalRequest, ToolCallPart, ToolResultPart, Usage
from ..models._base import Model, ModelRequest
from ..parts import StreamPart
from ..tools import Tool
from ._options import StepContext

__all__ = [
    "AskApprover",
    "CallModel",
    "Effect",
    "Emit",
    "EvaluateGates",
    "ExecuteTools",
    "PrepareStepCall",
    "SaveCheckpoint",
    "ToolInvocation",
    "ToolOutcome",
    "error_result",
]


@dataclass(frozen=True)
class ToolInvocation:
    """A validated call, ready to run.

    Attributes:
        tool: The tool the call names.
        call: The model's call.
        kwargs: The call's arguments, validated against the tool's schema.
    """

    tool: Tool
    call: ToolCallPart
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class ToolOutcome:
    """What running one call gave: a result, or the approvals a sub-agent now waits for.

    Attributes:
        result: The tool result (None when the call suspended).
        suspended: Requests a suspended sub-agent waits for (None when it did not suspend).
        usage: Model usage spent inside the call (sub-agents), added to the step.
    """

    result: ToolResultPart | None = None
    suspended: tuple[ToolApprovalRequest, ...] | None = None
    usage: Usage | None = None


def error_result(call: ToolCallPart, message: str) -> ToolResultPart:
    """An is_error result of ``call``: what the model sees when a call could not run."""
    return ToolResultPart(
        tool_call_id=call.tool_call_id, tool_name=call.tool_name, result=message, is_error=True
    )


@dataclass(frozen=True)
class Emit:
    """Deliver a stream part to subscribers. Send back None."""

    part: StreamPart


@dataclass(frozen=True)
class SaveCheckpoint:
    """Save a checkpoint (best-effort). Send back None.

    ``extends``: when set, ``checkpoint.messages`` begins with the very message
    objects of this history (the one this leg saved last, or the one it started
    from), so a store that takes the hint writes the new tail without comparing
    the whole history.
    """

    checkpoint: AgentCheckpoint
    extends: Sequence[Message] | None = None


@dataclass(frozen=True)
class PrepareStepCall:
    """Call ``prepare_step``. Send back its ``PrepareStepResult`` or None."""

    context: StepContext


@dataclass(frozen=True)
class CallModel:
    """Call the model. Send back a :class:`ModelResponse` (raise into the driver on failure).

    Attributes:
        step_index: The step the call belongs to.
        model: The model of this step (``prepare_step`` may change it).
        request: What the model is asked.
    """

    step_index: int
    model: Model
    request: ModelRequest


@dataclass(frozen=True)
class EvaluateGates:
    """Evaluate callable ``needs_approval`` gates. Send back one bool per invocation."""

    invocations: tuple[ToolInvocation, ...]


@dataclass(frozen=True)
class AskApprover:
    """Ask the server-mode approver. Send back one :class:`ToolApprovalResponse` per request."""

    requests: tuple[ToolApprovalRequest, ...]


@dataclass(frozen=True)
class ExecuteTools:
    """Run tools. Send back one :class:`ToolOutcome` (or None if not started) per invocation.

    With ``max_concurrency == 1`` calls run in order and the ones after a
    suspended call are not started.
    """

    step_index: int
    invocations: tuple[ToolInvocation, ...]
    max_concurrency: int | None


Effect = Union[
    Emit, SaveCheckpoint, PrepareStepCall, CallModel, EvaluateGates, AskApprover, ExecuteTools
]
