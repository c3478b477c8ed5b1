"""The stream parts, re-exported where the loop's users look for them (see ``nbdurable.parts``)."""

from ..parts import (
    ApprovalRequestStreamPart,
    ApprovalResolvedStreamPart,
    ErrorPart,
    FinishPart,
    StepFinishPart,
    StepStartPart,
    StreamPart,
    TextDeltaPart,
    ToolCallStreamPart,
    ToolResultStreamPart,
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
