"""OpenAI Agents SDK function tools as nbdurable tools (``Tool.from_openai_agents``).

Needs ``openai-agents``. The model sees the tool's own name, description and
strict JSON schema, and a call runs through the tool's own ``on_invoke_tool`` (its argument parsing,
validation and failure handling: an exception becomes the error text the SDK's
``failure_error_function`` writes, as in an SDK run). Its ``ToolContext`` carries
the call's ``tool_name``, ``tool_call_id`` and arguments and ``context=None``
(nbdurable has no run context object). ``needs_approval`` (a bool, or the SDK's
``(run_context, arguments, call_id)`` callable) gates calls with nbdurable's
approvals. Hosted tools (web search, file search, computer use, ...) run on
OpenAI's servers, not in the loop, and are refused.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Unpack

from .._errors import ConfigurationError
from .._extras import import_for
from ..tools import NeedsApproval, Tool, ToolContext, WrapOptions
from ._foreign import wrapped

__all__ = ["from_openai_agents"]


def from_openai_agents(tool: Any, **options: Unpack[WrapOptions]) -> Tool:
    """Wrap an OpenAI Agents SDK ``FunctionTool`` (what ``@function_tool`` makes).

    Args:
        tool: The SDK's function tool.
        **options: :class:`~nbdurable.tools.WrapOptions`; ``needs_approval``
            defaults to the tool's own.

    Returns:
        An nbdurable :class:`~nbdurable.tools.Tool`.

    Raises:
        ConfigurationError: ``openai-agents`` is missing, ``tool`` is not a
            function tool (a hosted tool, say).
        TypeError: An unknown option.
    """
    sdk: Any = import_for("openai-agents", "Tool.from_openai_agents", "agents")
    if not isinstance(tool, sdk.FunctionTool):
        raise ConfigurationError(
            f"{tool!r} is not an OpenAI Agents SDK FunctionTool (@function_tool): hosted tools "
            "run on OpenAI's servers and have no nbdurable form"
        )
    from agents.tool_context import ToolContext as SdkToolContext

    source = tool

    async def run(kwargs: dict[str, Any], context: ToolContext) -> Any:
        arguments = json.dumps(kwargs, ensure_ascii=False)
        ctx = SdkToolContext(
            context=None,
            tool_name=source.name,
            tool_call_id=context.tool_call_id,
            tool_arguments=arguments,
        )
        return await source.on_invoke_tool(ctx, arguments)

    return wrapped(
        options,
        name=source.name,
        description=source.description,
        needs_approval=_gate(source),
        parameters=dict(source.params_json_schema),
        execute=run,
        source=f"OpenAI Agents SDK tool {source.name!r}",
    )


def _gate(tool: Any) -> NeedsApproval:
    """The tool's ``needs_approval`` as nbdurable's (a bool, or a callable on the arguments)."""
    gate = tool.needs_approval
    if isinstance(gate, bool):
        return gate
    from agents.run_context import RunContextWrapper

    async def needs(args: dict[str, Any]) -> bool:
        # the SDK's gate takes (run context, arguments, call id); nbdurable's sees the arguments
        answer = gate(RunContextWrapper(context=None), args, "")
        return bool(await answer if inspect.isawaitable(answer) else answer)

    return needs
