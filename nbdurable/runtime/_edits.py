"""A human's edit of a gated call, and a reply in its place: checked before they are recorded.

An edit is allowed only when the call's tool allows it (``allow_edit``), and
its arguments must fit the tool's schema; a reply must say something. A bad
one is a typed error and nothing is recorded: the request still waits. The
tool is this process's definition when it serves the run's agent (its own
validation, the strictest); otherwise what the request recorded of it
(``allow_edit`` and its JSON schema ``parameters``), so a process that only
decides (the CLI, a bridge) checks the same. The leg that runs the call holds
the edit to the tool again (:mod:`nbdurable.loop._batch`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._errors import ConfigurationError, EditNotAllowedError, InvalidEditError
from .._json_schema import schema_problems
from ..loop._subagent import AgentTool
from ..messages import ToolApprovalRequest
from ..runs import RuntimeRun
from ..tools import Tool, ToolArgumentsError, normalize_tools
from ._agent import Registry

__all__ = ["check_edit", "check_reply", "tool_of"]


def tool_of(registry: Registry, record: RuntimeRun, request: ToolApprovalRequest) -> Tool | None:
    """The tool of ``request`` as this process defines the run's agent (None: it does not)."""
    agent = registry.get(record.agent_id, record.agent_version)
    if agent is None:
        return None
    tools: Mapping[str, Tool] = agent.tool_map
    for name in request.agent_path:  # down the sub-agents to the one that made the call
        sub = tools.get(name)
        if not isinstance(sub, AgentTool):
            return None
        tools = normalize_tools(sub.tools)
    return tools.get(request.tool_name)


def check_edit(
    registry: Registry, record: RuntimeRun, request: ToolApprovalRequest, arguments: Any
) -> dict[str, Any]:
    """The edited arguments, checked: the tool allows edits, and they fit its schema.

    Raises:
        EditNotAllowedError: The tool does not allow editing its arguments.
        InvalidEditError: The arguments are not a JSON object, or do not fit the schema.
    """
    tool = tool_of(registry, record, request)
    allowed = tool.allow_edit if tool is not None else request.allow_edit
    if not allowed:
        raise EditNotAllowedError(request.approval_id, request.tool_name)
    if not isinstance(arguments, Mapping) or not all(isinstance(k, str) for k in arguments):
        raise InvalidEditError(
            request.approval_id,
            request.tool_name,
            f"arguments must be a JSON object, not {type(arguments).__name__}",
        )
    edited = dict(arguments)
    if tool is not None:
        try:
            tool.validate_edit(edited)
        except ToolArgumentsError as exc:
            raise InvalidEditError(request.approval_id, request.tool_name, str(exc)) from None
        return edited
    problems = schema_problems(request.parameters or {}, edited)
    if problems:
        raise InvalidEditError(request.approval_id, request.tool_name, "; ".join(problems))
    return edited


def check_reply(text: Any) -> str:
    """A reply's text, checked.

    Raises:
        ConfigurationError: Not a string, or blank.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError("a reply needs text: the call's result in place of the tool")
    return text
