"""The managed runtime (seed 003): agents, registrations, limits, and (arriving) the scheduler."""

from .agent import TOOL_RECOVERY, Agent, Registry, ToolRecovery
from .engine import EmbeddedEngine, Engine
from .limits import Limits, ModelRetry, is_retryable
from .prompts import Prompt, canonical_prompt, prompt_message, validate_prompt
from .records import RuntimeRun, ToolIntent
from .run import Run, RunFailedError, RunResult
from .runtime import DurableRuntime

__all__ = [
    "TOOL_RECOVERY",
    "Agent",
    "DurableRuntime",
    "EmbeddedEngine",
    "Engine",
    "Limits",
    "ModelRetry",
    "Prompt",
    "Registry",
    "Run",
    "RunFailedError",
    "RunResult",
    "RuntimeRun",
    "ToolIntent",
    "ToolRecovery",
    "canonical_prompt",
    "is_retryable",
    "prompt_message",
    "validate_prompt",
]
