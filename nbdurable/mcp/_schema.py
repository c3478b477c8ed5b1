"""A shallow check of a call's arguments against an MCP tool's input schema.

It runs before a human is asked to approve the call, so an approval is never
spent on arguments the server would refuse for a missing or mistyped field.
Only the top level is checked (required properties, unknown ones when
``additionalProperties`` is false, and each property's plain JSON ``type``);
the server validates the rest itself. ``jsonschema`` is not used: its import
costs seconds where optional format checkers are installed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..tools import ToolArgumentsError

__all__ = ["shallow_validator"]

_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def shallow_validator(
    name: str, schema: Mapping[str, Any]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A validator for the tool's arguments (returns them unchanged when they pass)."""
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = [r for r in schema.get("required", ()) if isinstance(r, str)]
    closed = schema.get("additionalProperties") is False

    def validate(args: dict[str, Any]) -> dict[str, Any]:
        problems = [f"{key}: a required property is missing" for key in required if key not in args]
        for key, value in args.items():
            spec = properties.get(key)
            if spec is None:
                if closed:
                    problems.append(f"{key}: not a property of this tool")
                continue
            kinds = _plain_types(spec)
            if kinds and not any(_TYPES[k](value) for k in kinds):
                problems.append(f"{key}: {value!r} is not of type {' or '.join(kinds)}")
        if problems:
            raise ToolArgumentsError(f"Invalid arguments for tool {name!r}: " + "; ".join(problems))
        return args

    return validate


def _plain_types(spec: Any) -> list[str]:
    """The JSON types a property allows when it says so plainly (else none: not checked)."""
    wanted = spec.get("type") if isinstance(spec, Mapping) else None
    kinds = [wanted] if isinstance(wanted, str) else wanted
    if isinstance(kinds, list) and kinds and all(k in _TYPES for k in kinds):
        return [str(k) for k in kinds]
    return []
