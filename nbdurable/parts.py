"""The typed parts a run emits: what ``full_stream`` yields and the event log records.

Their text follows the lone-surrogate policy of :mod:`nbdurable.messages` (U+FFFD).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from .messages import (
    FrozenModel,
    JsonObject,
    Text,
    ToolApprovalRequest,
    ToolCallPart,
    ToolResultPart,
    Usage,
    VerdictSource,
    without_none,
)

__all__ = [
    "ApprovalRequestStreamPart",
    "ApprovalResolvedStreamPart",
    "ErrorPart",
    "FinishPart",
    "StepFinishPart",
    "StepStartPart",
    "StreamPart",
    "TextDeltaPart",
    "ToolCallDeltaPart",
    "ToolCallStreamPart",
    "ToolResultStreamPart",
]


class StepStartPart(FrozenModel):
    """A step (one model call and its tools) begins."""

    type: Literal["step-start"] = "step-start"
    step_index: int


class TextDeltaPart(FrozenModel):
    """A piece of the model's text, as it streams."""

    type: Literal["text-delta"] = "text-delta"
    step_index: int
    delta: Text


class ToolCallDeltaPart(FrozenModel):
    """A fragment of a tool call's JSON arguments, as the model streams the call.

    The fragments of one ``tool_call_id`` concatenate to the arguments' JSON text;
    the complete call follows as a ``tool-call`` part.
    """

    type: Literal["tool-call-delta"] = "tool-call-delta"
    step_index: int
    tool_call_id: Text
    tool_name: Text
    args_delta: Text


class ToolCallStreamPart(FrozenModel):
    """The model called a tool."""

    type: Literal["tool-call"] = "tool-call"
    step_index: int
    tool_call: ToolCallPart


class ApprovalRequestStreamPart(FrozenModel):
    """A gated call waits for a verdict; ``request.agent_path`` names the asking sub-agent."""

    type: Literal["tool-approval-request"] = "tool-approval-request"
    step_index: int
    request: ToolApprovalRequest


class ApprovalResolvedStreamPart(FrozenModel):
    """A pending approval got its verdict while a resumed leg settled it."""

    type: Literal["tool-approval-resolved"] = "tool-approval-resolved"
    step_index: int
    approval_id: Text
    tool_call_id: Text
    approved: bool
    reason: Text | None = None
    source: VerdictSource | None = None
    """Who gave the verdict and how (None: not recorded)."""
    arguments: JsonObject | None = None
    """The edited arguments the call runs with (None: not edited)."""
    original_arguments: JsonObject | None = None
    """With ``arguments``: the call's arguments as the model gave them."""
    reply: Text | None = None
    """The human's answer in place of the tool: the call's result (None: no reply)."""

    @model_serializer(mode="wrap")
    def _without_unrecorded_source(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(handler(self), "source", "arguments", "original_arguments", "reply")


class ToolResultStreamPart(FrozenModel):
    """A tool call finished (or was denied: ``result.is_error``)."""

    type: Literal["tool-result"] = "tool-result"
    step_index: int
    result: ToolResultPart


class StepFinishPart(FrozenModel):
    """A step finished; ``usage`` is the step's own usage."""

    type: Literal["step-finish"] = "step-finish"
    step_index: int
    usage: Usage
    finish_reason: Text


class FinishPart(FrozenModel):
    """The call finished: ``usage`` is this leg's, ``total_usage`` the whole run's."""

    type: Literal["finish"] = "finish"
    finish_reason: Text
    status: Literal["completed", "suspended"]
    usage: Usage
    total_usage: Usage


class ErrorPart(FrozenModel):
    """The call failed; the stream ends after this part."""

    type: Literal["error"] = "error"
    error_type: Text
    message: Text


StreamPart = Annotated[
    StepStartPart
    | TextDeltaPart
    | ToolCallDeltaPart
    | ToolCallStreamPart
    | ApprovalRequestStreamPart
    | ApprovalResolvedStreamPart
    | ToolResultStreamPart
    | StepFinishPart
    | FinishPart
    | ErrorPart,
    Field(discriminator="type"),
]
