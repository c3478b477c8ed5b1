"""A small JSON Schema check: what a human's edited tool arguments are held to.

Tools built from a pydantic model validate with it; a tool known only by its
JSON schema (an MCP tool, a client tool given a dict, a request read back from
a store by a process that does not hold the agent) is checked here. It covers
the keywords tool schemas use (``type``, ``properties``, ``required``,
``additionalProperties``, ``enum``, ``const``, ``items``, ``anyOf``/``oneOf``/
``allOf``, bounds on numbers, strings and arrays, local ``$ref``); a keyword it
does not know is not checked (the tool's own validation still runs before the
call does). No dependency: ``import nbdurable`` stays pydantic only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["schema_problems"]

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


def schema_problems(schema: Mapping[str, Any], value: Any) -> list[str]:
    """What is wrong with ``value`` under ``schema`` (empty: it fits), one phrase a problem."""
    problems: list[str] = []
    _check(schema, value, "arguments", schema, problems, 0)
    return problems


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for key in ref[2:].split("/"):
        if not isinstance(node, Mapping) or key not in node:
            return {}
        node = node[key]
    return node if isinstance(node, Mapping) else {}


def _is(value: Any, kind: str) -> bool:
    if kind in ("number", "integer") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, object))


def _check(
    schema: Any, value: Any, where: str, root: Mapping[str, Any], out: list[str], depth: int
) -> None:
    if not isinstance(schema, Mapping) or depth > 32:
        return
    schema = _resolve(schema, root)
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else None
    if kinds is not None and not any(_is(value, k) for k in kinds):
        out.append(f"{where}: expected {' or '.join(map(str, kinds))}, got {type(value).__name__}")
        return
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: must be one of {schema['enum']!r}")
    if "const" in schema and value != schema["const"]:
        out.append(f"{where}: must be {schema['const']!r}")
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if (
            isinstance(options, list)
            and options
            and all(_sub(o, value, where, root, depth) for o in options)
        ):
            out.append(f"{where}: matches none of the allowed forms")
    for option in schema.get("allOf") or ():
        _check(option, value, where, root, out, depth + 1)
    if isinstance(value, dict):
        _check_object(schema, value, where, root, out, depth)
    elif isinstance(value, (list, tuple)):
        items = schema.get("items")
        for index, item in enumerate(value):
            _check(items, item, f"{where}[{index}]", root, out, depth + 1)
        _bounds(len(value), schema, "minItems", "maxItems", where, "items", out)
    elif isinstance(value, str):
        _bounds(len(value), schema, "minLength", "maxLength", where, "characters", out)
    elif _is(value, "number"):
        _bounds(value, schema, "minimum", "maximum", where, "", out)


def _sub(schema: Any, value: Any, where: str, root: Mapping[str, Any], depth: int) -> list[str]:
    found: list[str] = []
    _check(schema, value, where, root, found, depth + 1)
    return found


def _check_object(
    schema: Mapping[str, Any],
    value: dict[str, Any],
    where: str,
    root: Mapping[str, Any],
    out: list[str],
    depth: int,
) -> None:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    for name in schema.get("required") or ():
        if name not in value:
            out.append(f"{_join(where, name)}: missing")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            _check(properties[name], item, _join(where, name), root, out, depth + 1)
        elif extra is False:
            out.append(f"{_join(where, name)}: not an argument of the tool")
        elif isinstance(extra, Mapping):
            _check(extra, item, _join(where, name), root, out, depth + 1)


def _join(where: str, name: str) -> str:
    return name if where == "arguments" else f"{where}.{name}"


def _bounds(
    size: Any, schema: Mapping[str, Any], low: str, high: str, where: str, unit: str, out: list[str]
) -> None:
    suffix = f" {unit}" if unit else ""
    minimum, maximum = schema.get(low), schema.get(high)
    if _is(minimum, "number") and size < minimum:
        out.append(f"{where}: at least {minimum}{suffix}")
    if _is(maximum, "number") and size > maximum:
        out.append(f"{where}: at most {maximum}{suffix}")
