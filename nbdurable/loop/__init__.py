"""The agent loop: a pure step machine and the async driver behind generate_text/stream_chat."""

from .blocking import generate_text_sync
from .driver import generate_text, resume_from_checkpoint
from .machine import AgentMachine, LegStart
from .options import (
    GenerateTextResult,
    PrepareStepResult,
    StepContext,
    StepResult,
    cost_exceeds,
    step_count_is,
    total_tokens_exceed,
)
from .parts import (
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
from .stream import StreamChatResult, resume_stream_from_checkpoint, stream_chat
from .subagent import AgentTool, agent_tool

__all__ = [
    "AgentMachine",
    "AgentTool",
    "ApprovalRequestStreamPart",
    "ApprovalResolvedStreamPart",
    "ErrorPart",
    "FinishPart",
    "GenerateTextResult",
    "LegStart",
    "PrepareStepResult",
    "StepContext",
    "StepFinishPart",
    "StepResult",
    "StepStartPart",
    "StreamChatResult",
    "StreamPart",
    "TextDeltaPart",
    "ToolCallStreamPart",
    "ToolResultStreamPart",
    "agent_tool",
    "cost_exceeds",
    "generate_text",
    "generate_text_sync",
    "resume_from_checkpoint",
    "resume_stream_from_checkpoint",
    "step_count_is",
    "stream_chat",
    "total_tokens_exceed",
]
