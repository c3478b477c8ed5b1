"""``agent_tool``: a sub-agent the parent model calls like any tool.

Here too what every driver shares about running one: the child's options and
start, and what its result means for the parent's call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .._errors import ConfigurationError
from ..durable._checkpoint import AgentCheckpoint
from ..messages import Message, ToolResultPart, user
from ..models._base import Model
from ..tools import Tool, normalize_tools
from ._effects import ToolInvocation, ToolOutcome, error_result
from ._options import DEFAULT_MAX_STEPS, GenerateTextResult, LoopOptions
from ._start import LegStart, leg_start_from_checkpoint

__all__ = [
    "AgentTool",
    "agent_tool",
    "child_options",
    "child_run_id",
    "child_start",
    "subagent_outcome",
    "subagent_prompt",
]


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


def child_options(parent: LoopOptions, agent: AgentTool, run_id: str | None) -> LoopOptions:
    """The options of a sub-agent's loop.

    Its own model, tools, instructions and limits; the parent's approver,
    verdicts, signer and deps; one level deeper on the agent path.

    Args:
        parent: The parent loop's options.
        agent: The sub-agent.
        run_id: The parent's run id (the tokens of a top-level run bind it).
    """
    assert agent.model is not None
    return LoopOptions(
        model=agent.model,
        tools=agent.tools,
        instructions=agent.instructions,
        max_steps=agent.max_steps,
        max_tool_concurrency=agent.max_tool_concurrency,
        approve_tool_call=parent.approve_tool_call,
        approval_responses=parent.approval_responses,
        approval_signer=parent.approval_signer,
        approval_max_age_ms=parent.approval_max_age_ms,
        deps=parent.deps,
        agent_path=(*parent.agent_path, agent.name),
        depth=parent.depth + 1,
        session_run_id=parent.session_run_id or run_id,
        approval_grants=parent.approval_grants,
    )


def subagent_prompt(invocation: ToolInvocation) -> tuple[Message, ...]:
    """The history a sub-agent starts from: the parent's prompt as one user message."""
    return (user(invocation.kwargs["prompt"]),)


def child_start(
    prompt: tuple[Message, ...], run_id: str, saved: AgentCheckpoint | None
) -> LegStart:
    """Where a checkpointing sub-agent starts: its saved checkpoint, else its prompt."""
    if saved is not None:
        return leg_start_from_checkpoint(saved)
    return LegStart(messages=prompt, run_id=run_id, durable=True)


def subagent_outcome(
    agent: AgentTool, invocation: ToolInvocation, result: GenerateTextResult, *, durable: bool
) -> ToolOutcome:
    """What a sub-agent's leg means for the parent's call.

    Args:
        agent: The sub-agent.
        invocation: The parent's call of it.
        result: The sub-agent's leg.
        durable: Whether the sub-agent checkpoints (a suspension can be resumed).

    Returns:
        Its final text as the result; the approvals it waits for when it
        suspended with a checkpoint; an ``is_error`` result when it suspended
        without one (nothing could resume it).
    """
    if result.status == "suspended":
        if durable:
            return ToolOutcome(suspended=result.pending_approvals, usage=result.usage)
        names = ", ".join(sorted({r.tool_name for r in result.pending_approvals})) or "a tool"
        message = (
            f"Sub-agent {agent.name!r} needs approval for {names}, but there is no "
            "approver: run the parent with a durable session for client-mode "
            "approval, or pass approve_tool_call."
        )
        return ToolOutcome(result=error_result(invocation.call, message), usage=result.usage)
    return ToolOutcome(
        result=ToolResultPart(
            tool_call_id=invocation.call.tool_call_id,
            tool_name=invocation.call.tool_name,
            result=result.text,
        ),
        usage=result.usage,
    )


def _never_called(**_: Any) -> Any:  # the driver runs agent tools itself
    raise RuntimeError("agent tools are run by the loop driver")
