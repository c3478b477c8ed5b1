"""The Chat Completions wire format: our requests to it, its responses to ours.

Plain dicts and duck-typed reads of the SDK's objects, so that the mapping does
not depend on one ``openai`` version and tolerates compatible servers (vLLM,
Ollama, LM Studio, llama.cpp) that leave optional fields out.
"""

from __future__ import annotations

import uuid
from typing import Any

from .._media import ResultImage, result_media
from .._openai_chat import ERROR_PREFIX, parse_arguments, to_openai
from ..messages import Message, Part, TextPart, ToolCallPart, ToolResultPart, Usage
from ._base import FinishReason, ModelRequest
from ._openai_schema import strict_schema
from ._pricing import Price, cost_of

__all__ = [
    "finish_reason",
    "new_call_id",
    "parse_arguments",
    "pictures_heading",
    "request_messages",
    "request_params",
    "response_content",
    "usage_of",
]

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
}


def request_params(request: ModelRequest, *, result_images: bool = True) -> dict[str, Any]:
    """The request's messages, tools and response format as ``create()`` parameters.

    ``result_images``: a tool result's pictures (an MCP tool's) go to the model as
    images (see :func:`request_messages`); off, as JSON text.
    """
    params: dict[str, Any] = {"messages": request_messages(request, result_images=result_images)}
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": spec.parameters,
                },
            }
            for spec in request.tools
        ]
    if request.output_schema is not None:
        strict = strict_schema(request.output_schema)
        params["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": request.output_name,
                "schema": request.output_schema if strict is None else strict,
                "strict": strict is not None,
            },
        }
    return params


def request_messages(request: ModelRequest, *, result_images: bool = True) -> list[dict[str, Any]]:
    """The history as Chat Completions messages, system instructions first.

    A ``tool`` message holds text only, so with ``result_images`` a result of text
    and pictures (an MCP tool's) is sent as its text, saying where its pictures
    are, and the pictures follow the turn's tool messages as ``image_url`` parts
    of one ``user`` message: the model sees them as images, not as base64 inside
    JSON text.
    """
    out: list[dict[str, Any]] = []
    if request.instructions:
        out.append({"role": "system", "content": request.instructions})
    if not result_images:
        out.extend(to_openai(request.messages))
        return out
    pictures: list[dict[str, Any]] = []  # of the tool messages since the last other message
    for message in request.messages:
        if message.role != "tool" and pictures:
            out.append({"role": "user", "content": pictures})
            pictures = []
        rendered = to_openai([message])
        if message.role == "tool":
            rendered = [_with_pictures(item, message, pictures) for item in rendered]
        out.extend(rendered)
    if pictures:
        out.append({"role": "user", "content": pictures})
    return out


def _with_pictures(
    item: dict[str, Any], message: Message, pictures: list[dict[str, Any]]
) -> dict[str, Any]:
    """``item``, a tool message, with its result's text only; its pictures added to ``pictures``."""
    part = next(
        (p for p in message.tool_results if p.tool_call_id == item.get("tool_call_id")), None
    )
    media = None if part is None else result_media(part.result)
    if part is None or media is None:
        return item
    images = [m for m in media if isinstance(m, ResultImage)]
    texts = [m for m in media if isinstance(m, str)]
    count = f"{len(images)} image{'' if len(images) == 1 else 's'}"
    texts.append(f"[{count}: in the user message after the tool results]")
    content = "\n".join(texts)
    pictures.append({"type": "text", "text": pictures_heading(part, count)})
    pictures.extend({"type": "image_url", "image_url": {"url": i.url}} for i in images)
    return {**item, "content": ERROR_PREFIX + content if part.is_error else content}


def pictures_heading(part: ToolResultPart, count: str) -> str:
    """The line before a result's pictures in the user message that carries them."""
    return f"The {count} of the result of tool call {part.tool_call_id} ({part.tool_name}):"


def finish_reason(reason: str | None, *, has_tool_calls: bool) -> FinishReason:
    """Map a Chat Completions finish reason (a turn with tool calls is ``tool_calls``)."""
    mapped = _FINISH.get(reason or "", "other")
    if has_tool_calls and mapped in ("stop", "other"):
        return "tool_calls"
    return mapped


def usage_of(usage: Any, price: Price | None) -> Usage:
    """The SDK's ``CompletionUsage`` (or None) as our :class:`Usage`, priced."""
    if usage is None:
        return Usage()
    prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
    completion = int(getattr(usage, "completion_tokens", 0) or 0)
    total = int(getattr(usage, "total_tokens", 0) or 0) or prompt + completion
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    counted = Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=total,
        cached_input_tokens=None if cached is None else int(cached),
    )
    return counted.model_copy(update={"cost": cost_of(counted, price)})


def new_call_id() -> str:
    """An id for a tool call whose server gave none."""
    return f"call_{uuid.uuid4().hex[:24]}"


def response_content(message: Any) -> tuple[tuple[Part, ...], bool]:
    """A completion message's parts (text, then tool calls) and whether it was a refusal."""
    parts: list[Part] = []
    text = getattr(message, "content", None) or ""
    refusal = getattr(message, "refusal", None) or ""
    if text or refusal:
        parts.append(TextPart(text=text or refusal))
    for call in getattr(message, "tool_calls", None) or ():
        function = getattr(call, "function", None)
        if function is None:  # a custom (non-function) tool call: not ours
            continue
        parts.append(
            ToolCallPart(
                tool_call_id=getattr(call, "id", None) or new_call_id(),
                tool_name=function.name,
                args=parse_arguments(function.arguments or ""),
            )
        )
    return tuple(parts), bool(refusal and not text)
