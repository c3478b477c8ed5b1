"""nbdurable: durable, inspectable LLM agent runs for Jupyter.

The agent loop checkpoints at every step into a :class:`SessionStore`, suspends on
tool calls that need a human, and resumes from the store after a restart with
HMAC-signed verdicts. ``import nbdurable`` loads no Jupyter or pandas code, and
no store backend until it is used.
"""

import typing as _typing

from . import inspect as inspect  # the module; pandas loads only when a frame is built
from ._deps import Clock, Deps, SystemClock
from ._errors import (
    ApprovalExpiredError,
    ApprovalNotPendingError,
    ApproverNotAllowedError,
    AuthenticationError,
    CheckpointNotFoundError,
    CheckpointVersionError,
    ConfigurationError,
    DurableConflictError,
    EditNotAllowedError,
    FencedOutError,
    InvalidEditError,
    InvalidRequestError,
    LateResultUndecidedError,
    LeaseLostError,
    LimitExceededError,
    ModelError,
    NbdurableError,
    OutputValidationError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
    RunEndedError,
    RunNotFoundError,
    ScriptExhaustedError,
    StoreCorruptionError,
    StoreUnavailableError,
    StoreWriteError,
    WaitingForHumanError,
)
from ._lazy import lazy_attributes as _lazy_attributes
from ._sync import run_sync
from ._version import __version__
from .durable import (
    AgentCheckpoint,
    ApprovalSigner,
    CheckpointInfo,
    DurableSession,
    ForkPoint,
    HistoryStore,
    RunRecord,
    SessionStore,
    StepStats,
    deserialize_checkpoint,
    serialize_checkpoint,
)
from .events import Event, RunView, fold_events, read_events, subscribe
from .history import History
from .loop import (
    GenerateTextResult,
    PrepareStepResult,
    StepContext,
    StepResult,
    StreamChatResult,
    agent_tool,
    cost_exceeds,
    generate_text,
    generate_text_sync,
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
from .runtime import (
    Agent,
    DurableRuntime,
    Graph,
    GraphNode,
    Limits,
    ModelRetry,
    Run,
    RunFailedError,
    TaskContext,
    TaskRun,
    define_task,
    is_retryable,
)
from .stores import InMemorySessionStore, open_store
from .tools import Tool, ToolContext, client_tool, tool
from .tracing import instrument

if _typing.TYPE_CHECKING:
    from .models._anthropic import AnthropicModel
    from .models._openai import OpenAIChatModel
    from .stores.jsonl import JsonlSessionStore
    from .stores.postgres import PostgresSessionStore
    from .stores.sqlite import SqliteSessionStore

# Store backends and model adapters load on first use, so `import nbdurable` stays light.
__getattr__ = _lazy_attributes(
    __name__,
    {
        "AnthropicModel": ".models._anthropic",
        "OpenAIChatModel": ".models._openai",
        "JsonlSessionStore": ".stores.jsonl",
        "PostgresSessionStore": ".stores.postgres",
        "SqliteSessionStore": ".stores.sqlite",
    },
)


def load_ipython_extension(ipython: _typing.Any) -> None:
    """``%load_ext nbdurable``: add the ``%%agent`` and ``%durable`` magics.

    IPython and the notebook code are imported only now, never by ``import nbdurable``.
    """
    from .notebook import load_ipython_extension as load

    load(ipython)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Agent",
    "AgentCheckpoint",
    "AnthropicModel",
    "ApprovalExpiredError",
    "ApprovalNotPendingError",
    "ApproverNotAllowedError",
    "ApprovalSigner",
    "AuthenticationError",
    "CheckpointInfo",
    "CheckpointNotFoundError",
    "CheckpointVersionError",
    "Clock",
    "ConfigurationError",
    "Deps",
    "DurableConflictError",
    "DurableRuntime",
    "DurableSession",
    "EditNotAllowedError",
    "Event",
    "FencedOutError",
    "ForkPoint",
    "GenerateTextResult",
    "Graph",
    "GraphNode",
    "History",
    "HistoryStore",
    "ImagePart",
    "InMemorySessionStore",
    "InvalidEditError",
    "InvalidRequestError",
    "JsonlSessionStore",
    "LateResultUndecidedError",
    "LeaseLostError",
    "LimitExceededError",
    "Limits",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelRetry",
    "NbdurableError",
    "OpenAIChatModel",
    "OutputValidationError",
    "PostgresSessionStore",
    "PrepareStepResult",
    "ProviderError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RateLimitError",
    "Run",
    "RunEndedError",
    "RunFailedError",
    "RunNotFoundError",
    "RunRecord",
    "RunView",
    "ScriptExhaustedError",
    "ScriptedModel",
    "SessionStore",
    "SqliteSessionStore",
    "StepContext",
    "StepResult",
    "StepStats",
    "StoreCorruptionError",
    "StoreUnavailableError",
    "StoreWriteError",
    "StreamChatResult",
    "StreamingModel",
    "SystemClock",
    "TaskContext",
    "TaskRun",
    "TextPart",
    "Tool",
    "ToolApprovalRequest",
    "ToolApprovalResponse",
    "ToolCallPart",
    "ToolContext",
    "ToolResultPart",
    "Turn",
    "Usage",
    "WaitingForHumanError",
    "__version__",
    "agent_tool",
    "assistant",
    "client_tool",
    "cost_exceeds",
    "define_task",
    "deserialize_checkpoint",
    "fold_events",
    "generate_text",
    "generate_text_sync",
    "instrument",
    "is_retryable",
    "load_ipython_extension",
    "open_store",
    "read_events",
    "resume_from_checkpoint",
    "resume_stream_from_checkpoint",
    "run_sync",
    "serialize_checkpoint",
    "step_count_is",
    "stream_chat",
    "subscribe",
    "system",
    "tool",
    "tool_message",
    "total_tokens_exceed",
    "user",
]
