"""The agent loop: a pure step machine and the async driver behind generate_text/stream_chat.

The machine (:class:`AgentMachine`) yields effects; a :class:`Driver` performs
them. Every engine drives the same machine through a ``Driver`` subclass that
overrides its per-effect hooks (see :class:`Driver` and docs/core.md).
"""

from ..parts import (
    ApprovalRequestStreamPart,
    ApprovalResolvedStreamPart,
    ErrorPart,
    FinishPart,
    StepFinishPart,
    StepStartPart,
    StreamPart,
    TextDeltaPart,
    ToolCallDeltaPart,
    ToolCallStreamPart,
    ToolResultStreamPart,
)
from ._blocking import generate_text_sync
from ._driver import Driver
from ._effects import (
    AskApprover,
    CallModel,
    Effect,
    Emit,
    EvaluateGates,
    ExecuteTools,
    PrepareStepCall,
    SaveCheckpoint,
    ToolInvocation,
    ToolOutcome,
    error_result,
)
from ._generate import generate_text, resume_from_checkpoint
from ._machine import AgentMachine
from ._options import (
    AgentOptions,
    GenerateTextResult,
    PrepareStepResult,
    StepContext,
    StepResult,
    cost_exceeds,
    step_count_is,
    total_tokens_exceed,
)
from ._start import LegStart, leg_start_from_checkpoint
from ._stream import StreamChatResult, resume_stream_from_checkpoint, stream_chat
from ._subagent import AgentTool, agent_tool

__all__ = [
    "AgentMachine",
    "AgentOptions",
    "AgentTool",
    "ApprovalRequestStreamPart",
    "ApprovalResolvedStreamPart",
    "AskApprover",
    "CallModel",
    "Driver",
    "Effect",
    "Emit",
    "ErrorPart",
    "EvaluateGates",
    "ExecuteTools",
    "FinishPart",
    "GenerateTextResult",
    "LegStart",
    "PrepareStepCall",
    "PrepareStepResult",
    "SaveCheckpoint",
    "StepContext",
    "StepFinishPart",
    "StepResult",
    "StepStartPart",
    "StreamChatResult",
    "StreamPart",
    "TextDeltaPart",
    "ToolCallDeltaPart",
    "ToolCallStreamPart",
    "ToolInvocation",
    "ToolOutcome",
    "ToolResultStreamPart",
    "agent_tool",
    "cost_exceeds",
    "error_result",
    "generate_text",
    "generate_text_sync",
    "leg_start_from_checkpoint",
    "resume_from_checkpoint",
    "resume_stream_from_checkpoint",
    "step_count_is",
    "stream_chat",
    "total_tokens_exceed",
]
