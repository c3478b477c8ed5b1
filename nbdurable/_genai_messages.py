"""Messages in the JSON shape of the OpenTelemetry GenAI semantic conventions (v1.41.0).

What trace viewers (Phoenix, Logfire, Langfuse, ...) read from ``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions`` and ``gen_ai.tool.definitions``:
messages of ``role`` and ``parts``, a text part ``{"type": "text", "content": ...}``, a
tool call ``{"type": "tool_call", "id", "name", "arguments"}``, a tool result
``{"type": "tool_call_response", "id", "response"}``, an inline image a ``blob`` part
(base64), an image by address a ``uri`` part. The schemas are those published with
the conventions (``docs/gen-ai/gen-ai-*.json``); tests validate against them.

Approval bookkeeping and message metadata are nbdurable's own and no model sees
them: they are left out.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._media import sniff_media_type
from .messages import ImagePart, Message, Part, TextPart, ToolCallPart, ToolResultPart

if TYPE_CHECKING:
    from .models._base import ToolSpec

__all__ = [
    "finish_reason",
    "input_messages",
    "output_message",
    "part",
    "parts",
    "system_instructions",
    "tool_definitions",
]

_FINISH_REASONS = {"tool_calls": "tool_call"}
"""nbdurable's finish reasons that the conventions spell otherwise (the rest are the same)."""


def finish_reason(reason: str) -> str:
    """A finish reason as the conventions spell it (``tool_calls`` is ``tool_call``)."""
    return _FINISH_REASONS.get(reason, reason)


def part(value: Part) -> dict[str, Any] | None:
    """One part in the conventions' shape (None: nbdurable's own, not for the trace)."""
    if isinstance(value, TextPart):
        return {"type": "text", "content": value.text}
    if isinstance(value, ToolCallPart):
        return {
            "type": "tool_call",
            "id": value.tool_call_id,
            "name": value.tool_name,
            "arguments": value.args,
        }
    if isinstance(value, ToolResultPart):
        return {"type": "tool_call_response", "id": value.tool_call_id, "response": value.result}
    if isinstance(value, ImagePart):
        if value.data is not None:
            return {
                "type": "blob",
                "modality": "image",
                "mime_type": value.media_type or sniff_media_type(value.data),
                "content": base64.b64encode(value.data).decode("ascii"),
            }
        return {"type": "uri", "modality": "image", "mime_type": value.media_type, "uri": value.url}
    return None


def parts(values: Iterable[Part]) -> list[dict[str, Any]]:
    """The parts in the conventions' shape, nbdurable's own left out."""
    return [p for p in map(part, values) if p is not None]


def input_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """A model call's history as ``gen_ai.input.messages``."""
    return [{"role": m.role, "parts": parts(m.content)} for m in messages]


def output_message(content: Sequence[Part], reason: str) -> dict[str, Any]:
    """One assistant turn as an item of ``gen_ai.output.messages``."""
    return {"role": "assistant", "parts": parts(content), "finish_reason": finish_reason(reason)}


def system_instructions(text: str) -> list[dict[str, Any]]:
    """System instructions as ``gen_ai.system_instructions``."""
    return [{"type": "text", "content": text}]


def tool_definitions(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """The tools on offer as ``gen_ai.tool.definitions``."""
    out: list[dict[str, Any]] = []
    for t in tools:
        definition: dict[str, Any] = {"type": "function", "name": t.name}
        if t.description:
            definition["description"] = t.description
        definition["parameters"] = t.parameters
        out.append(definition)
    return out
