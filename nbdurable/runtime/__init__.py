"""The managed runtime (seed 003): agents, registrations, limits, and (arriving) the scheduler."""

from .agent import TOOL_RECOVERY, Agent, Registry, ToolRecovery
from .limits import Limits, ModelRetry
from .prompts import Prompt, canonical_prompt, prompt_message, validate_prompt

__all__ = [
    "TOOL_RECOVERY",
    "Agent",
    "Limits",
    "ModelRetry",
    "Prompt",
    "Registry",
    "ToolRecovery",
    "canonical_prompt",
    "prompt_message",
    "validate_prompt",
]
