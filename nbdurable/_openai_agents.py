"""OpenAI Agents SDK ``Agent`` definitions as nbdurable agents (``Agent.from_openai_agents``).

What maps: the name (the agent's id), string ``instructions``, function tools
(through :func:`~nbdurable.interop._openai_agents_tools.from_openai_agents`, their
``needs_approval`` becoming nbdurable approvals), ``output_type`` (a type: the
run's structured output) and ``handoffs``: each handoff agent becomes a sub-agent
tool ``transfer_to_<name>`` (:func:`~nbdurable.agent_tool`) on the same model.
That is the SDK's "agents as tools" pattern rather than a handoff: the sub-agent
answers the calling agent, which relays, and the run stays one durable run with
the sub-agent's approvals under ``agent_path``. A handoff back to an agent already
on the path is left out (triage patterns hand back and forth).

What does not map is refused with a :class:`~nbdurable.ConfigurationError`
rather than ignored: dynamic (callable) instructions, hosted tools, MCP servers
on the agent (use :mod:`nbdurable.mcp`), guardrails, lifecycle hooks, a stored
``prompt``, a ``tool_use_behavior`` other than running the model again, and an
output schema object. ``model_settings`` are the model's business: configure
the nbdurable model you pass (or that a model name resolves to).
"""

from __future__ import annotations

import re
from typing import Any

from ._errors import ConfigurationError
from ._extras import import_for
from .interop._openai_agents_tools import from_openai_agents as tool_from_openai_agents
from .loop._subagent import agent_tool
from .models._base import Model
from .tools import Tool

__all__ = ["agent_fields"]


def agent_fields(agent: Any, model: Model | None = None) -> dict[str, Any]:
    """The nbdurable ``Agent`` fields of an SDK agent: id, model, tools, instructions, output_type.

    Args:
        agent: An ``agents.Agent``.
        model: The nbdurable model to run it on (default: the agent's ``model``
            when it is a model name, as an ``OpenAIChatModel``).

    Raises:
        ConfigurationError: ``openai-agents`` is missing, or the agent uses
            something that has no nbdurable form (see the module's docstring).
    """
    sdk: Any = import_for("openai-agents", "Agent.from_openai_agents", "agents")
    if not isinstance(agent, sdk.Agent):
        raise ConfigurationError(f"{agent!r} is not an OpenAI Agents SDK Agent")
    resolved = model if model is not None else _model_of(agent)
    output_type = agent.output_type
    if output_type is str:
        output_type = None  # the SDK's default: plain text
    elif output_type is not None and not isinstance(output_type, type):
        raise ConfigurationError(
            f"agent {agent.name!r}: an output schema object has no nbdurable form; give a type "
            "(a pydantic model, dataclass or TypedDict)"
        )
    return {
        "id": agent.name,
        "model": resolved,
        "tools": _tools(agent, resolved, path=(agent.name,)),
        "instructions": _instructions(agent),
        "output_type": output_type,
    }


def _model_of(agent: Any) -> Model:
    if isinstance(agent.model, str):
        from .models._openai import OpenAIChatModel

        return OpenAIChatModel(agent.model)
    raise ConfigurationError(
        f"agent {agent.name!r}: pass model= (an nbdurable model) to run it; its model is "
        f"{agent.model!r}, not a model name"
    )


def _instructions(agent: Any) -> str | None:
    instructions = agent.instructions
    if instructions is None or isinstance(instructions, str):
        return instructions
    raise ConfigurationError(
        f"agent {agent.name!r}: dynamic (callable) instructions have no nbdurable form; "
        "give a string"
    )


def _refuse_what_does_not_map(agent: Any) -> None:
    unsupported = {
        "mcp_servers": "MCP servers (use nbdurable.mcp's tools instead)",
        "input_guardrails": "input guardrails",
        "output_guardrails": "output guardrails",
        "hooks": "lifecycle hooks",
        "prompt": "a stored prompt",
    }
    for field, what in unsupported.items():
        if getattr(agent, field, None):
            raise ConfigurationError(f"agent {agent.name!r}: {what} have no nbdurable form")
    if agent.tool_use_behavior != "run_llm_again":
        raise ConfigurationError(
            f"agent {agent.name!r}: tool_use_behavior={agent.tool_use_behavior!r} has no "
            "nbdurable form (nbdurable runs the model again after every tool call)"
        )


def _tools(agent: Any, model: Model, path: tuple[str, ...]) -> list[Tool]:
    _refuse_what_does_not_map(agent)
    tools: list[Tool] = []
    for tool in agent.tools:
        enabled = getattr(tool, "is_enabled", True)
        if enabled is False:
            continue  # the SDK would not offer it either
        if not isinstance(enabled, bool):
            raise ConfigurationError(
                f"agent {agent.name!r}: tool {getattr(tool, 'name', tool)!r} is enabled by a "
                "callable, which has no nbdurable form"
            )
        tools.append(tool_from_openai_agents(tool))
    for handoff in agent.handoffs:
        target = _handoff_agent(agent, handoff)
        if target.name in path:
            continue  # a handoff back up the path: the caller is already running
        tools.append(
            agent_tool(
                f"transfer_to_{_snake(target.name)}",
                model=model,
                tools=_tools(target, model, (*path, target.name)),
                instructions=_instructions(target),
                description=target.handoff_description or f"Hand the task to {target.name}.",
            )
        )
    return tools


def _handoff_agent(agent: Any, handoff: Any) -> Any:
    import agents

    if isinstance(handoff, agents.Agent):
        return handoff
    raise ConfigurationError(
        f"agent {agent.name!r}: a Handoff object (input filters, on_handoff callbacks) has no "
        "nbdurable form; list the agent itself in handoffs"
    )


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") or "agent"
