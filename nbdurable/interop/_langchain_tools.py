"""LangChain tools as nbdurable tools (``Tool.from_langchain``; needs ``langchain-core``).

The model sees the LangChain tool's own name, description and argument schema
(as LangChain would send them to a chat model); arguments are validated with
its own schema. The call goes through the tool's ``ainvoke`` with a tool call,
so LangChain's own input parsing, ``InjectedToolCallId`` and the tool's
``handle_tool_error`` apply. The result is the content LangChain would put in
its ``ToolMessage``; an error status or an exception becomes an ``is_error``
result the model reads.

Not carried across: callbacks other than those configured on the tool itself,
``return_direct`` (the run goes on), the artifact of a
``response_format="content_and_artifact"`` tool, and injected arguments other
than the tool call id and nbdurable's own :class:`~nbdurable.ToolContext`
(declare one as ``ctx: Annotated[ToolContext, InjectedToolArg]``).
"""

from __future__ import annotations

from typing import Any, Unpack

from pydantic import BaseModel

from .._errors import ConfigurationError
from .._extras import import_for
from ..tools import Tool, ToolContext, WrapOptions
from ._foreign import wrapped

__all__ = ["LangChainToolError", "from_langchain"]


class LangChainToolError(Exception):
    """A LangChain tool reported an error status; the message is what the model reads."""


def from_langchain(tool: Any, **options: Unpack[WrapOptions]) -> Tool:
    """Wrap a LangChain ``BaseTool`` (``@tool`` functions, ``StructuredTool``, subclasses).

    Args:
        tool: The LangChain tool.
        **options: :class:`~nbdurable.tools.WrapOptions` (``needs_approval``
            defaults to False: a LangChain tool has no gate of its own).

    Returns:
        An nbdurable :class:`~nbdurable.tools.Tool`.

    Raises:
        ConfigurationError: ``langchain-core`` is missing, ``tool`` is not a
            LangChain tool, or it injects an argument nbdurable cannot supply.
        TypeError: An unknown option.
    """
    lc_tools: Any = import_for("langchain", "Tool.from_langchain", "langchain_core.tools")
    if not isinstance(tool, lc_tools.BaseTool):
        hint = (
            " (decorate the function with langchain_core.tools.tool, or use nbdurable.tool)"
            if callable(tool)
            else ""
        )
        raise ConfigurationError(f"{tool!r} is not a LangChain BaseTool{hint}")
    from langchain_core.utils.function_calling import convert_to_openai_tool

    spec = convert_to_openai_tool(tool)["function"]
    parameters = spec.get("parameters") or {"type": "object", "properties": {}}
    context_params = _context_params(tool, lc_tools)
    call_schema = tool.tool_call_schema
    validator = None
    if isinstance(call_schema, type) and issubclass(call_schema, BaseModel):
        model: type[BaseModel] = call_schema

        def validator(args: dict[str, Any]) -> dict[str, Any]:
            model.model_validate(args)
            return args  # LangChain parses the raw arguments again itself

    async def run(kwargs: dict[str, Any], context: ToolContext) -> Any:
        args = {**kwargs, **dict.fromkeys(context_params, context)}
        call = {"type": "tool_call", "name": tool.name, "args": args, "id": context.tool_call_id}
        config = {
            "metadata": {
                "nbdurable_run_id": context.run_id,
                "nbdurable_idempotency_key": context.idempotency_key,
            }
        }
        return _content(await tool.ainvoke(call, config=config))

    return wrapped(
        options,
        name=tool.name,
        description=tool.description,
        needs_approval=False,
        parameters=parameters,
        execute=run,
        source=f"LangChain tool {tool.name!r}",
        validator=validator,
    )


def _context_params(tool: Any, lc_tools: Any) -> list[str]:
    """Injected parameters that take nbdurable's ToolContext; refuse ones nobody can supply."""
    call_schema = tool.tool_call_schema
    if not (isinstance(call_schema, type) and issubclass(call_schema, BaseModel)):
        return []  # a JSON-schema tool has no injected arguments
    input_schema = tool.get_input_schema()
    params: list[str] = []
    for field_name, field in input_schema.model_fields.items():
        if field_name in call_schema.model_fields:
            continue
        if field.annotation is ToolContext:
            params.append(field_name)
            continue
        call_id = lc_tools.InjectedToolCallId
        if any(m is call_id or isinstance(m, call_id) for m in field.metadata):
            continue  # LangChain fills it from the tool call
        raise ConfigurationError(
            f"LangChain tool {tool.name!r} injects {field_name!r}, which nbdurable cannot "
            "supply: only the tool call id (InjectedToolCallId) and "
            "Annotated[nbdurable.ToolContext, InjectedToolArg] are injected"
        )
    return params


def _content(output: Any) -> Any:
    """The ToolMessage's content; an error status raises what the model should read."""
    from langchain_core.messages import ToolMessage

    if isinstance(output, ToolMessage):
        if output.status == "error":
            raise LangChainToolError(_text(output.content))
        return output.content
    return output


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            item if isinstance(item, str) else str(item.get("text", item))
            for item in content
            if isinstance(item, str | dict)
        ]
        return "\n".join(parts)
    return str(content)
