"""nbdurable: durable, inspectable LLM agent runs for Jupyter.

The agent loop checkpoints at every step into a :class:`SessionStore`, suspends on
tool calls that need a human, and resumes from the store after a restart with
HMAC-signed verdicts. ``import nbdurable`` loads no Jupyter or pandas code.
"""

from ._deps import Clock, Deps, SystemClock
from ._errors import (
    CheckpointNotFoundError,
    CheckpointVersionError,
    ConfigurationError,
    DurableConflictError,
    LimitExceededError,
    ModelError,
    NbdurableError,
    RunNotFoundError,
    ScriptExhaustedError,
    StoreCorruptionError,
)
from .durable import (
    AgentCheckpoint,
    ApprovalSigner,
    CheckpointInfo,
    DurableSession,
    SessionStore,
    deserialize_checkpoint,
    serialize_checkpoint,
)
from .loop import (
    GenerateTextResult,
    PrepareStepResult,
    StepContext,
    StepResult,
    StreamChatResult,
    agent_tool,
    cost_exceeds,
    generate_text,
    resume_from_checkpoint,
    resume_stream_from_checkpoint,
    step_count_is,
    stream_chat,
    total_tokens_exceed,
)
from .messages import (
    ImagePart,
    Message,
    TextPart,
    ToolApprovalRequest,
    ToolApprovalResponse,
    ToolCallPart,
    ToolResultPart,
    Usage,
    assistant,
    system,
    tool_message,
    user,
)
from .models import Model, ModelRequest, ModelResponse, ScriptedModel, StreamingModel, Turn
from .stores import InMemorySessionStore, open_store
from .tools import Tool, ToolContext, client_tool, tool

__version__ = "0.1.0"

__all__ = [
    "AgentCheckpoint",
    "ApprovalSigner",
    "CheckpointInfo",
    "CheckpointNotFoundError",
    "CheckpointVersionError",
    "Clock",
    "ConfigurationError",
    "Deps",
    "DurableConflictError",
    "DurableSession",
    "GenerateTextResult",
    "ImagePart",
    "InMemorySessionStore",
    "LimitExceededError",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "NbdurableError",
    "PrepareStepResult",
    "RunNotFoundError",
    "ScriptExhaustedError",
    "ScriptedModel",
    "SessionStore",
    "StepContext",
    "StepResult",
    "StoreCorruptionError",
    "StreamChatResult",
    "StreamingModel",
    "SystemClock",
    "TextPart",
    "Tool",
    "ToolApprovalRequest",
    "ToolApprovalResponse",
    "ToolCallPart",
    "ToolContext",
    "ToolResultPart",
    "Turn",
    "Usage",
    "__version__",
    "agent_tool",
    "assistant",
    "client_tool",
    "cost_exceeds",
    "deserialize_checkpoint",
    "generate_text",
    "open_store",
    "resume_from_checkpoint",
    "resume_stream_from_checkpoint",
    "serialize_checkpoint",
    "step_count_is",
    "stream_chat",
    "system",
    "tool",
    "tool_message",
    "total_tokens_exceed",
    "user",
]
