"""A tool whose schema, validation and execution come from elsewhere."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigurationError
from ..tools import NeedsApproval, Tool, ToolContext, WrapOptions, to_jsonable

__all__ = ["ForeignTool", "Runner", "Validator", "wrapped"]

Validator = Callable[[dict[str, Any]], dict[str, Any]]
"""Checks a call's arguments; returns what the runner gets (raises pydantic's
``ValidationError`` or :class:`ToolArgumentsError`)."""
Runner = Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
"""Runs a validated call with its context; returns the result."""


@dataclass(frozen=True, eq=False)
class ForeignTool(Tool):
    """A :class:`Tool` that delegates validation and execution to another framework.

    Approval, recovery, the idempotency key and the :class:`ToolContext` stay
    nbdurable's: the loop treats it like any other tool. Its ``execute`` is a
    :data:`Runner`, called with the validated arguments and the context.

    Attributes:
        validator: Checks the arguments (None: any JSON object is passed on).
        source: What the tool wraps, for messages.
    """

    validator: Validator | None = None
    source: str = ""

    def checked_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` through the source framework's own schema (:attr:`validator`)."""
        return args if self.validator is None else self.validator(args)

    async def invoke(self, kwargs: dict[str, Any], context: ToolContext) -> Any:
        """Run the call through the source framework; return a JSON-able result."""
        if self.execute is None:
            raise ConfigurationError(f"tool {self.name!r} is a client tool and cannot run here")
        return to_jsonable(await self.execute(kwargs, context))


def wrapped(
    options: WrapOptions,
    *,
    name: str,
    description: str | None,
    needs_approval: NeedsApproval,
    parameters: dict[str, Any],
    execute: Runner,
    source: str,
    validator: Validator | None = None,
) -> ForeignTool:
    """A framework's tool as a :class:`ForeignTool`, ``options`` over its name, description, gate.

    Raises:
        TypeError: An option :class:`~nbdurable.tools.WrapOptions` does not name (as
            for an unknown keyword).
    """
    if unknown := sorted(options.keys() - WrapOptions.__annotations__.keys()):
        raise TypeError(f"a wrapped tool got unexpected options: {', '.join(unknown)}")
    given = options.get("description")
    gate = options.get("needs_approval")
    return ForeignTool(
        name=options.get("name") or name,
        description=given if given is not None else (description or ""),
        parameters=parameters,
        execute=execute,
        needs_approval=needs_approval if gate is None else gate,
        recovery=options.get("recovery"),
        allow_edit=options.get("allow_edit", False),
        validator=validator,
        source=source,
    )
