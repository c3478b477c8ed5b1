"""Pydantic AI tools as nbdurable tools (``Tool.from_pydantic_ai``; needs ``pydantic-ai-slim``).

The model sees the tool's own name, description and JSON schema, and the
arguments are validated by the tool's own validator (then its
``args_validator``, when it has one). A tool that takes a ``RunContext[Deps]``
receives a context carrying the ``deps=`` given to ``from_pydantic_ai`` and
the call's ``tool_call_id``, ``tool_name``, ``retry`` (0) and ``run_step``
(the nbdurable step index); other fields of the context (the model, the
usage, the message history) belong to a Pydantic AI agent run and raise a
clear error when read. ``ModelRetry`` and ``ToolFailed`` become ``is_error``
results carrying their message; a ``ToolReturn``'s ``return_value`` is the
result (its extra content and metadata are not carried). ``prepare`` is not
called: an nbdurable tool is offered at every step.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Unpack

from .._errors import ConfigurationError
from .._extras import import_for
from ..tools import NOT_GIVEN, Tool, ToolContext, WrapOptions
from ._foreign import wrapped

__all__ = ["PydanticAIToolError", "from_pydantic_ai"]


class PydanticAIToolError(Exception):
    """A Pydantic AI tool asked for a retry or failed; the message is what the model reads."""


def from_pydantic_ai(tool: Any, *, deps: Any = NOT_GIVEN, **options: Unpack[WrapOptions]) -> Tool:
    """Wrap a ``pydantic_ai.Tool``, or a plain function Pydantic AI would register as one.

    Args:
        tool: The Pydantic AI tool or function.
        deps: The dependencies a tool taking ``RunContext[Deps]`` reads as
            ``ctx.deps`` (required for such a tool; ``None`` is a valid value).
        **options: :class:`~nbdurable.tools.WrapOptions`; ``needs_approval``
            defaults to the tool's ``requires_approval``.

    Returns:
        An nbdurable :class:`~nbdurable.tools.Tool`.

    Raises:
        ConfigurationError: ``pydantic-ai-slim`` is missing, ``tool`` is neither a
            Pydantic AI tool nor a function, the tool takes a ``RunContext``
            and no ``deps=`` was given.
        TypeError: An unknown option.
    """
    pai: Any = import_for("pydantic-ai", "Tool.from_pydantic_ai", "pydantic_ai")
    if isinstance(tool, pai.Tool):
        source = tool
    elif inspect.isfunction(tool) or inspect.ismethod(tool):
        try:
            source = pai.Tool(tool)
        except Exception as exc:  # Pydantic AI's own refusal of the signature
            raise ConfigurationError(f"Pydantic AI cannot make a tool of {tool!r}: {exc}") from exc
    else:
        raise ConfigurationError(f"{tool!r} is neither a pydantic_ai.Tool nor a function")
    if source.takes_ctx and deps is NOT_GIVEN:
        raise ConfigurationError(
            f"Pydantic AI tool {source.name!r} takes a RunContext: pass the dependencies it "
            "reads as ctx.deps, e.g. Tool.from_pydantic_ai(tool, deps=my_deps)"
        )
    context_class = _context_class()
    schema = source.function_schema

    def validator(args: dict[str, Any]) -> dict[str, Any]:
        validated: dict[str, Any] = schema.validator.validate_python(args)
        return validated

    async def run(kwargs: dict[str, Any], context: ToolContext) -> Any:
        ctx = context_class(
            None if deps is NOT_GIVEN else deps,
            tool_call_id=context.tool_call_id,
            tool_name=source.name,
            retry=0,
            run_step=context.step_index,
        )
        exceptions = pai.exceptions
        try:
            if source.args_validator is not None:
                checked = source.args_validator(ctx, **kwargs)
                if inspect.isawaitable(checked):
                    await checked
            value = await schema.call(kwargs, ctx)
        except (exceptions.ModelRetry, exceptions.ToolFailed) as exc:
            raise PydanticAIToolError(exc.message) from exc
        if isinstance(value, pai.ToolReturn):
            value = value.return_value
        from pydantic_core import to_jsonable_python

        return to_jsonable_python(value, fallback=str)

    return wrapped(
        options,
        name=source.name,
        description=source.description,
        needs_approval=source.requires_approval,
        parameters=dict(schema.json_schema),
        execute=run,
        source=f"Pydantic AI tool {source.name!r}",
        validator=validator,
    )


@functools.cache
def _context_class() -> Any:
    """A RunContext that names what nbdurable carries when user code reads something else."""
    try:
        from pydantic_ai.durable_exec import DurableRunContext
    except ImportError as exc:  # an older pydantic-ai-slim
        raise ConfigurationError(
            f"Tool.from_pydantic_ai needs a newer pydantic-ai-slim ({exc}): "
            "pip install -U 'nbdurable[pydantic-ai]'"
        ) from exc

    class NbdurableRunContext(DurableRunContext[Any]):
        """The RunContext of a Pydantic AI tool that nbdurable runs."""

        def unavailable_field_message(self, name: str) -> str:
            return (
                f"{name!r} is not available to a Pydantic AI tool that nbdurable runs: its "
                "RunContext carries deps, tool_call_id, tool_name, retry and run_step"
            )

    return NbdurableRunContext
