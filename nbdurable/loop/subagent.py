"""``agent_tool``: a sub-agent the parent model calls like any tool."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .._errors import ConfigurationError
from ..models.base import Model
from ..tools import Tool, normalize_tools
from .options import DEFAULT_MAX_STEPS

__all__ = ["AgentTool", "agent_tool", "child_run_id"]


class _AgentArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = Field(description="The task for the sub-agent, in plain language.")


@dataclass(frozen=True, eq=False)
class AgentTool(Tool):
    """A tool whose execution is a nested agent loop (built by :func:`agent_tool`)."""

    model: Model | None = None
    tools: dict[str, Tool] = field(default_factory=dict)
    instructions: str | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    max_tool_concurrency: int | None = None


def child_run_id(parent_run_id: str, agent_name: str, tool_call_id: str) -> str:
    """The key a sub-agent checkpoints under: ``{parent_run_id}::{agent_name}#{tool_call_id}``."""
    return f"{parent_run_id}::{agent_name}#{tool_call_id}"


def agent_tool(
    name: str,
    *,
    model: Model,
    tools: Iterable[Tool] | Mapping[str, Tool] | None = None,
    instructions: str | None = None,
    description: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_tool_concurrency: int | None = None,
) -> AgentTool:
    """Wrap a sub-agent as a tool taking ``{"prompt": str}`` and returning its final text.

    Inside a durable run the sub-agent checkpoints under
    ``{parent_run_id}::{name}#{tool_call_id}``; a gated call inside it (with no
    inherited server-mode ``approve_tool_call``) suspends the child and the
    parent, and the parent's pending approvals carry ``agent_path``. Without a
    session such a call returns an is_error result to the parent model.

    Args:
        name: Tool name, also the agent's name in ``agent_path``.
        model: The sub-agent's model.
        tools: The sub-agent's tools.
        instructions: The sub-agent's system instructions.
        description: What the parent model is told the agent does.
        max_steps: Runaway guard of the sub-agent.
        max_tool_concurrency: Parallelism of the sub-agent's tool batches.
    """
    if not hasattr(model, "generate"):
        raise ConfigurationError(f"agent_tool {name!r}: {model!r} is not a Model")
    schema = _AgentArgs.model_json_schema()
    schema.pop("title", None)
    schema["properties"]["prompt"].pop("title", None)
    return AgentTool(
        name=name,
        description=description or f"Delegate a task to the {name} agent.",
        parameters=schema,
        execute=_never_called,
        args_model=_AgentArgs,
        model=model,
        tools=normalize_tools(tools),
        instructions=instructions,
        max_steps=max_steps,
        max_tool_concurrency=max_tool_concurrency,
    )


def _never_called(**_: Any) -> Any:  # the driver runs agent tools itself
    raise RuntimeError("agent tools are run by the loop driver")
