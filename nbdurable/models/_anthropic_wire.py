"""Anthropic Messages API wire format: requests from our history, responses into our parts.

Pure data mapping (no SDK import), shared by ``generate`` and ``stream`` of
:class:`~nbdurable.models._anthropic.AnthropicModel`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from .._media import result_media, sniff_media_type
from ..messages import ImagePart, Message, Part, TextPart, ToolCallPart, ToolResultPart, Usage
from ._base import FinishReason, ModelRequest, ModelResponse
from ._pricing import Price, cost_of

__all__ = ["StructuredMode", "build_params", "finish_reason", "response_from_blocks", "usage_of"]

StructuredMode = Literal["tool", "native"]

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

_OUTPUT_TOOL_DESCRIPTION = (
    "Give your final answer by calling this tool; its input is the answer, "
    "matching the schema exactly."
)


def build_params(
    request: ModelRequest,
    *,
    model: str,
    max_tokens: int,
    structured: StructuredMode,
    transform_schema: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``client.messages.create`` for ``request``.

    System messages of the history and ``request.instructions`` go to ``system``;
    tool messages become user turns of ``tool_result`` blocks (consecutive user
    turns merged into one, as the API requires).
    """
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": to_messages(request.messages),
    }
    system = [request.instructions] if request.instructions else []
    system += [m.text for m in request.messages if m.role == "system" and m.text]
    if system:
        params["system"] = "\n\n".join(system)
    tools: list[dict[str, Any]] = [
        _tool(spec.name, spec.description, spec.parameters) for spec in request.tools
    ]
    schema = request.output_schema
    if schema is not None and structured == "native":
        strict = transform_schema(schema) if transform_schema is not None else schema
        params["output_config"] = {"format": {"type": "json_schema", "schema": strict}}
    elif schema is not None:
        # Tool mode: the answer is the input of a forced tool call. With other tools
        # on offer, the model must call one of them or the answer tool ("any").
        tools.append(_tool(request.output_name, _OUTPUT_TOOL_DESCRIPTION, schema))
        params["tool_choice"] = (
            {"type": "any"} if request.tools else {"type": "tool", "name": request.output_name}
        )
    if tools:
        params["tools"] = tools
    return params


def _tool(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "input_schema": schema}
    if description:
        tool["description"] = description
    return tool


def to_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Our history as Anthropic ``messages``: alternating user and assistant turns."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = [b for b in (_block(p, role) for p in message.content) if b is not None]
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _block(part: Part, role: str) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ToolCallPart):
        return {"type": "tool_use", "id": part.tool_call_id, "name": part.tool_name,
                "input": part.args}  # fmt: skip
    if isinstance(part, ToolResultPart):
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.tool_call_id}
        content: str | list[dict[str, Any]] = _result_blocks(part.result) or _result_text(
            part.result
        )
        if content:
            block["content"] = content
        if part.is_error:
            block["is_error"] = True
        return block
    if isinstance(part, ImagePart) and role == "user":
        return {"type": "image", "source": _image_source(part)}
    return None  # approval records (and images in assistant turns) are not sent


def _result_blocks(result: Any) -> list[dict[str, Any]] | None:
    """A result of text and pictures (an MCP tool's) as the blocks of a ``tool_result``.

    None: not such a result (sent as text).
    """
    media = result_media(result)
    if media is None:
        return None
    return [
        {"type": "text", "text": item}
        if isinstance(item, str)
        else {
            "type": "image",
            "source": {"type": "base64", "media_type": item.media_type, "data": item.data},
        }
        for item in media
    ]


def _result_text(result: Any) -> str:
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


def _image_source(part: ImagePart) -> dict[str, Any]:
    if part.data is None:
        return {"type": "url", "url": part.url}
    media_type = part.media_type or sniff_media_type(part.data)
    data = base64.b64encode(part.data).decode("ascii")
    return {"type": "base64", "media_type": media_type, "data": data}


def finish_reason(stop_reason: str | None) -> FinishReason:
    """Anthropic's ``stop_reason`` as ours."""
    return _STOP_REASONS.get(stop_reason or "", "other")


def usage_of(raw: Mapping[str, Any], price: Price | None) -> Usage:
    """Anthropic usage as ours: cache reads and writes count as input tokens."""
    cache_read = raw.get("cache_read_input_tokens")
    cache_write = raw.get("cache_creation_input_tokens") or 0
    input_tokens = (raw.get("input_tokens") or 0) + (cache_read or 0) + cache_write
    output_tokens = raw.get("output_tokens") or 0
    usage = Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
        cached_input_tokens=cache_read,
    )
    cost = cost_of(usage, price, cache_write_tokens=cache_write)
    return usage if cost is None else usage.model_copy(update={"cost": cost})


def response_from_blocks(
    blocks: Iterable[Mapping[str, Any]],
    *,
    stop_reason: str | None,
    usage: Usage,
    model_id: str | None,
    output_tool: str | None,
) -> ModelResponse:
    """A response from content blocks (dicts: ``text`` and ``tool_use`` are kept).

    With ``output_tool`` (structured output in tool mode), a call of that tool is
    the answer: its input becomes the response text (and the only text).
    """
    content: list[Part] = []
    answer: str | None = None
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            content.append(TextPart(text=block["text"]))
        elif kind == "tool_use" and output_tool is not None and block["name"] == output_tool:
            answer = block.get("raw_input") or json.dumps(block.get("input") or {})
        elif kind == "tool_use":
            content.append(
                ToolCallPart(
                    tool_call_id=block["id"], tool_name=block["name"], args=block.get("input") or {}
                )
            )
    finish = finish_reason(stop_reason)
    if answer is not None:
        content = [TextPart(text=answer), *(p for p in content if isinstance(p, ToolCallPart))]
        if finish == "tool_calls" and len(content) == 1:
            finish = "stop"
    return ModelResponse(
        content=tuple(content), usage=usage, finish_reason=finish, model_id=model_id
    )
