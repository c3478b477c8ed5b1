"""The bridge's OpenAPI schema, made to say what the app really answers.

FastAPI derives most of it from the routes; what the routes cannot declare is
added here, once, for every operation:

- every error answer (400, 413, 422) is a JSON :class:`ErrorBody`, also on the
  approval page's HTML route (FastAPI would declare its 422 as ``text/html``);
- a body that cannot be parsed (not UTF-8, not JSON) is a 400 on every
  operation that takes one;
- a body over ``max_body_bytes`` is a 413 on every operation (the limit is
  checked before routing, also for the approval links).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

__all__ = ["truthful_openapi"]

_ERROR_BODY = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
_UNPARSED = "The body cannot be parsed: not UTF-8, or not JSON"
_TOO_LARGE = "Request body over max_body_bytes, or a prompt over max_payload_bytes"
_METHODS = frozenset({"get", "put", "post", "delete", "patch", "head", "options", "trace"})


def truthful_openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` with the additions above (built once, like FastAPI's own)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()  # cached by FastAPI after the first call
        for path_item in schema.get("paths", {}).values():
            for method, operation in path_item.items():
                if method in _METHODS:
                    _complete(operation)
        return schema

    return openapi


def _complete(operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    if "requestBody" in operation:
        responses.setdefault("400", {"description": _UNPARSED})
    responses.setdefault("413", {"description": _TOO_LARGE})
    for status in ("400", "413", "422"):
        if status in responses:
            responses[status]["content"] = dict(_ERROR_BODY)
