"""The typed parts a run emits: what ``full_stream`` yields and the event log records.

Their text follows the lone-surrogate policy of :mod:`nbdurable.messages` (U+FFFD).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from .messages import (
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
    "ToolCallStreamPart",
    "ToolResultStreamPart",
]

_CONFIG = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")


class StepStartPart(BaseModel):
    """A step (one model call and its tools) begins."""

    model_config = _CONFIG
    type: Literal["step-start"] = "step-start"
    step_index: int


class TextDeltaPart(BaseModel):
    """A piece of the model's text, as it streams."""

    model_config = _CONFIG
    type: Literal["text-delta"] = "text-delta"
    step_index: int
    delta: Text


class ToolCallStreamPart(BaseModel):
    """The model called a tool."""

    model_config = _CONFIG
    type: Literal["tool-call"] = "tool-call"
    step_index: int
    tool_call: ToolCallPart


class ApprovalRequestStreamPart(BaseModel):
    """A gated call waits for a verdict; ``request.agent_path`` names the asking sub-agent."""

    model_config = _CONFIG
    type: Literal["tool-approval-request"] = "tool-approval-request"
    step_index: int
    request: ToolApprovalRequest


class ApprovalResolvedStreamPart(BaseModel):
    """A pending approval got its verdict while a resumed leg settled it."""

    model_config = _CONFIG
    type: Literal["tool-approval-resolved"] = "tool-approval-resolved"
    step_index: int
    approval_id: Text
    tool_call_id: Text
    approved: bool
    reason: Text | None = None
    source: VerdictSource | None = None
    """Who gave the verdict and how (None: not recorded)."""

    @model_serializer(mode="wrap")
    def _without_unrecorded_source(self, handler: SerializerFunctionWrapHandler) -> Any:
        return without_none(handler(self), "source")


class ToolResultStreamPart(BaseModel):
    """A tool call finished (or was denied: ``result.is_error``)."""

    model_config = _CONFIG
    type: Literal["tool-result"] = "tool-result"
    step_index: int
    result: ToolResultPart


class StepFinishPart(BaseModel):
    """A step finished; ``usage`` is the step's own usage."""

    model_config = _CONFIG
    type: Literal["step-finish"] = "step-finish"
    step_index: int
    usage: Usage
    finish_reason: Text


class FinishPart(BaseModel):
    """The call finished: ``usage`` is this leg's, ``total_usage`` the whole run's."""

    model_config = _CONFIG
    type: Literal["finish"] = "finish"
    finish_reason: Text
    status: Literal["completed", "suspended"]
    usage: Usage
    total_usage: Usage


class ErrorPart(BaseModel):
    """The call failed; the stream ends after this part."""

    model_config = _CONFIG
    type: Literal["error"] = "error"
    error_type: Text
    message: Text


StreamPart = Annotated[
    StepStartPart
    | TextDeltaPart
    | ToolCallStreamPart
    | ApprovalRequestStreamPart
    | ApprovalResolvedStreamPart
    | ToolResultStreamPart
    | StepFinishPart
    | FinishPart
    | ErrorPart,
    Field(discriminator="type"),
]
