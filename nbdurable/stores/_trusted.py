"""Messages built from stored JSON whose content hashes were just verified.

A node's id is the sha256 of its message JSON as nbdurable wrote it from a
validated :class:`~nbdurable.messages.Message`, so JSON that hashes to its id is
known-good: validating it again costs a cold load about twice what parsing it
does. This module parses with :func:`json.loads` and builds the models directly,
for the shapes the loop writes (text, tool call and tool result parts, exactly
the fields ``model_dump_json`` writes, of the right JSON types). Anything else
(images, approval requests, a field it does not expect) returns None, and the
caller validates the whole history as before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar, get_args

from pydantic import BaseModel

from ..messages import Message, Role, TextPart, ToolCallPart, ToolResultPart

__all__ = ["built", "trusted_messages"]

M = TypeVar("M", bound=BaseModel)

_ROLES = frozenset(get_args(Role))
_MESSAGE_FIELDS = frozenset(Message.model_fields)
_TEXT_FIELDS = frozenset(TextPart.model_fields)
_CALL_FIELDS = frozenset(ToolCallPart.model_fields)
_RESULT_FIELDS = frozenset(ToolResultPart.model_fields)
_set = object.__setattr__


def built(cls: type[M], values: dict[str, Any], given: Iterable[str] | None = None) -> M:
    """``cls`` holding ``values`` (every field), not validated: only for checked shapes.

    What BaseModel.model_construct does when every field is given, without its
    per-field Python loop: the same instance state as validation leaves.
    ``given``: the fields validation would count as set (default: all of them).
    """
    model = cls.__new__(cls)
    _set(model, "__dict__", values)
    _set(model, "__pydantic_fields_set__", set(values if given is None else given))
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


_built = built


def _part(item: Any) -> BaseModel | None:
    if type(item) is not dict:
        return None
    kind = item.get("type")
    if kind == "text":
        if item.keys() == _TEXT_FIELDS and type(item["text"]) is str:
            return _built(TextPart, item)
    elif kind == "tool_call":
        if (
            item.keys() == _CALL_FIELDS
            and type(item["tool_call_id"]) is str
            and type(item["tool_name"]) is str
            and type(item["args"]) is dict
        ):
            return _built(ToolCallPart, item)
    elif kind == "tool_result" and (
        item.keys() == _RESULT_FIELDS
        and type(item["tool_call_id"]) is str
        and type(item["tool_name"]) is str
        and type(item["is_error"]) is bool
    ):
        return _built(ToolResultPart, item)
    return None


def _message(data: Any) -> Message | None:
    if (
        type(data) is not dict
        or data.keys() != _MESSAGE_FIELDS
        or data["role"] not in _ROLES
        or type(data["content"]) is not list
        or (data["metadata"] is not None and type(data["metadata"]) is not dict)
    ):
        return None
    parts = []
    for item in data["content"]:
        part = _part(item)
        if part is None:
            return None
        parts.append(part)
    data["content"] = tuple(parts)
    return _built(Message, data)


def trusted_messages(texts: Sequence[str]) -> tuple[Message, ...] | None:
    """The messages of hash-verified JSON texts, or None when one needs full validation.

    Only for texts whose node hashes were verified: it checks shapes, not values.
    """
    # One parse of the texts as one JSON array: a cold load parses a thousand
    # small documents, and json.loads costs as much per call as per message.
    joined = "[" + ",".join(texts) + "]"
    # A lone surrogate would reach a str through json.loads; validation replaces it.
    # An image is validated anyway: its base64 is not parsed twice.
    if "\\ud" in joined or "\\uD" in joined or '"type":"image"' in joined:
        return None
    try:
        data = json.loads(joined)
    except ValueError:
        return None
    if len(data) != len(texts):  # a text that was not one JSON value
        return None
    found: list[Message] = []
    for item in data:
        message = _message(item)
        if message is None:
            return None
        found.append(message)
    return tuple(found)
