"""The managed runtime: agents, limits, the scheduler, tasks and graphs."""

from ..runs import LateResult, RuntimeRun, ToolIntent
from ._agent import TOOL_RECOVERY, Agent, Registry, ToolRecovery
from ._engine import EmbeddedEngine, Engine
from ._graphs import Graph, GraphNode
from ._late_results import use_late_result
from ._limits import Limits, ModelRetry, is_retryable
from ._notify import Notifier, verify_notification
from ._prompts import Prompt, canonical_prompt, prompt_message, validate_prompt
from ._run import Run, RunFailedError, RunResult
from ._runtime import DurableRuntime, RuntimeOptions
from ._tasks import TaskContext, TaskDefinition, TaskRun, define_task

__all__ = [
    "TOOL_RECOVERY",
    "Agent",
    "DurableRuntime",
    "EmbeddedEngine",
    "Engine",
    "Graph",
    "GraphNode",
    "LateResult",
    "Limits",
    "ModelRetry",
    "Notifier",
    "Prompt",
    "Registry",
    "Run",
    "RunFailedError",
    "RunResult",
    "RuntimeOptions",
    "RuntimeRun",
    "TaskContext",
    "TaskDefinition",
    "TaskRun",
    "ToolIntent",
    "ToolRecovery",
    "canonical_prompt",
    "define_task",
    "is_retryable",
    "prompt_message",
    "use_late_result",
    "validate_prompt",
    "verify_notification",
]
