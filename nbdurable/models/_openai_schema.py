"""JSON schemas for OpenAI's strict structured outputs.

Strict mode (``"strict": true``) wants every object closed
(``additionalProperties: false``) with all its properties required, and no
``$ref`` with sibling keywords. A pydantic schema is made so: optional fields
become required (the model then always writes them; the loop's validation still
accepts them). A schema with an open object (a ``dict[str, X]`` field) cannot be
strict; it is sent as is with ``"strict": false``.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["strict_schema"]


def strict_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """A strict-mode copy of ``schema``, or None when it has an open object."""
    root = copy.deepcopy(schema)
    try:
        return _strict(root, root)
    except (_Open, RecursionError):  # RecursionError: a self-referencing $ref with siblings
        return None


class _Open(Exception):
    """An object with ``additionalProperties`` other than false."""


def _strict(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    for key in ("$defs", "definitions"):
        for name, sub in (node.get(key) or {}).items():
            node[key][name] = _strict(sub, root)
    is_object = node.get("type") == "object" or "properties" in node
    if is_object and node.setdefault("additionalProperties", False) is not False:
        raise _Open
    properties = node.get("properties")
    if isinstance(properties, dict):
        node["required"] = list(properties)
        node["properties"] = {k: _strict(v, root) for k, v in properties.items()}
    if isinstance(node.get("items"), dict):
        node["items"] = _strict(node["items"], root)
    for key in ("anyOf", "allOf", "prefixItems"):
        if isinstance(node.get(key), list):
            node[key] = [_strict(v, root) for v in node[key]]
    if "default" in node and node["default"] is None:
        del node["default"]
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1 and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        del node["$ref"]
        return _strict({**copy.deepcopy(target), **node}, root)
    return node
