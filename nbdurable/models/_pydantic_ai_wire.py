"""Our requests as Pydantic AI's model-level messages, its responses and stream events as ours.

Pydantic AI is reached through the modules in :class:`PydanticAI` (typed ``Any``),
so this file imports without the extra and does not depend on one release's
type annotations.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from .._extras import import_for
from .._media import result_media, sniff_media_type
from .._openai_chat import INVALID_ARGS_KEY, parse_arguments
from ..messages import ImagePart, Message, Part, TextPart, ToolCallPart, ToolResultPart, Usage
from ._base import (
    FinishReason,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    TextDeltaEvent,
    ToolCallDeltaEvent,
)
from ._pricing import Price, cost_of

__all__ = [
    "PydanticAI",
    "StreamState",
    "StructuredMode",
    "history",
    "load",
    "parameters",
    "response_of",
    "usage_of",
]

StructuredMode = Literal["tool", "native", "prompted"]

_OUTPUT_DESCRIPTION = "Give the final answer: call this with the answer as its arguments."

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_call": "tool_calls",
    "error": "error",
}


@dataclass(frozen=True)
class PydanticAI:
    """The Pydantic AI modules the adapter uses."""

    messages: Any
    models: Any
    tools: Any
    output: Any
    exceptions: Any
    direct: Any


def load(what: str) -> PydanticAI:
    """Import Pydantic AI, or raise :class:`ConfigurationError` naming the extra."""
    names = ("messages", "models", "tools", "output", "exceptions", "direct")
    return PydanticAI(**{n: import_for("pydantic-ai", what, f"pydantic_ai.{n}") for n in names})


# -- requests ---------------------------------------------------------------------------------


def history(request: ModelRequest, pai: PydanticAI) -> list[Any]:
    """The history as Pydantic AI ``ModelRequest``/``ModelResponse`` messages.

    Consecutive system, user and tool messages make one ``ModelRequest`` (its parts
    in order); each assistant message is one ``ModelResponse``. The instructions go
    on the last request, where Pydantic AI reads the instructions in force.
    """
    m = pai.messages
    out: list[Any] = []
    parts: list[Any] = []
    for message in request.messages:
        if message.role == "assistant":
            if parts:
                out.append(m.ModelRequest(parts=parts))
                parts = []
            out.append(m.ModelResponse(parts=_response_parts(message, m)))
        elif message.role == "system":
            parts.append(m.SystemPromptPart(message.text))
        elif message.role == "user":
            parts.append(m.UserPromptPart(_user_content(message, m)))
        else:
            parts.extend(_tool_return(result, m) for result in message.tool_results)
    if parts or not out:
        out.append(m.ModelRequest(parts=parts))
    if request.instructions:
        last = next(i for i in range(len(out) - 1, -1, -1) if isinstance(out[i], m.ModelRequest))
        out[last].instructions = request.instructions
    return out


def _user_content(message: Message, m: Any) -> str | list[Any]:
    if all(isinstance(p, TextPart) for p in message.content):
        return message.text
    content: list[Any] = []
    for part in message.content:
        if isinstance(part, TextPart):
            content.append(part.text)
        elif isinstance(part, ImagePart):
            content.append(_image(part, m))
    return content


def _image(part: ImagePart, m: Any) -> Any:
    if part.url is not None:
        if part.media_type:
            return m.ImageUrl(part.url, media_type=part.media_type)
        return m.ImageUrl(part.url)
    data = part.data or b""
    return m.BinaryContent(data, media_type=part.media_type or sniff_media_type(data))


def _response_parts(message: Message, m: Any) -> list[Any]:
    parts: list[Any] = []
    for part in message.content:
        if isinstance(part, TextPart) and part.text:
            parts.append(m.TextPart(part.text))
        elif isinstance(part, ToolCallPart):
            parts.append(m.ToolCallPart(part.tool_name, _call_args(part), part.tool_call_id))
    return parts


def _call_args(call: ToolCallPart) -> dict[str, Any] | str:
    raw = call.args.get(INVALID_ARGS_KEY)
    if len(call.args) == 1 and isinstance(raw, str):
        return raw  # send back exactly what the model wrote
    return dict(call.args)


def _tool_return(result: ToolResultPart, m: Any) -> Any:
    return m.ToolReturnPart(
        result.tool_name,
        _return_content(result.result, m),
        result.tool_call_id,
        outcome="failed" if result.is_error else "success",
    )


def _return_content(result: Any, m: Any) -> Any:
    """A result of text and pictures (an MCP tool's) as text and ``BinaryContent``.

    Pydantic AI's models send those as images (OpenAI Responses: ``input_image``
    parts of the ``function_call_output``); any other result goes as it is.
    """
    media = result_media(result)
    if media is None:
        return result
    try:
        return [
            item
            if isinstance(item, str)
            else m.BinaryContent(base64.b64decode(item.data), media_type=item.media_type)
            for item in media
        ]
    except (binascii.Error, ValueError):  # not base64: the model reads it as JSON text
        return result


def parameters(request: ModelRequest, pai: PydanticAI, mode: StructuredMode) -> Any:
    """``ModelRequestParameters``: the function tools, and the output schema in ``mode``."""
    tool_definition = pai.tools.ToolDefinition
    tools = [
        tool_definition(
            name=spec.name,
            description=spec.description or None,
            parameters_json_schema=spec.parameters,
        )
        for spec in request.tools
    ]
    params: dict[str, Any] = {"function_tools": tools}
    schema = request.output_schema
    if schema is not None and mode == "tool":
        params["output_mode"] = "tool"
        params["output_tools"] = [
            tool_definition(
                name=request.output_name,
                description=_OUTPUT_DESCRIPTION,
                parameters_json_schema=schema,
                kind="output",
            )
        ]
        params["allow_text_output"] = False
    elif schema is not None:
        params["output_mode"] = mode
        params["output_object"] = pai.output.OutputObjectDefinition(
            json_schema=schema, name=request.output_name
        )
    return pai.models.ModelRequestParameters(**params)


# -- responses --------------------------------------------------------------------------------


def usage_of(usage: Any, price: Price | None) -> Usage:
    """Pydantic AI's ``RequestUsage`` as ours, priced from the table.

    Its ``input_tokens`` already include the cache reads and writes, as ours do.
    """
    if usage is None:
        return Usage()
    prompt = int(getattr(usage, "input_tokens", 0) or 0)
    completion = int(getattr(usage, "output_tokens", 0) or 0)
    cached = int(getattr(usage, "cache_read_tokens", 0) or 0)
    written = int(getattr(usage, "cache_write_tokens", 0) or 0)
    counted = Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=prompt + completion,
        cached_input_tokens=cached or None,
    )
    cost = cost_of(counted, price, cache_write_tokens=written)
    return counted.model_copy(update={"cost": cost})


def response_of(
    response: Any, *, output_tool: str | None, price: Price | None, model_id: str
) -> ModelResponse:
    """Pydantic AI's ``ModelResponse`` as ours.

    Text parts are joined into one text part; tool calls keep their ids; a call of
    ``output_tool`` (structured output in tool mode) is the answer, returned as
    JSON text. Thinking, native-tool and file parts are not carried across.
    """
    texts: list[str] = []
    calls: list[Part] = []
    answer: str | None = None
    for part in getattr(response, "parts", ()):
        kind = getattr(part, "part_kind", None)
        if kind == "text":
            texts.append(part.content)
        elif kind == "tool-call" and output_tool is not None and part.tool_name == output_tool:
            answer = _args_text(part.args)
        elif kind == "tool-call":
            calls.append(
                ToolCallPart(
                    tool_call_id=part.tool_call_id,
                    tool_name=part.tool_name,
                    args=_args_dict(part.args),
                )
            )
    text = answer if answer is not None else "".join(texts)
    content: list[Part] = [TextPart(text=text)] if text else []
    content.extend(calls)
    finish = _FINISH.get(getattr(response, "finish_reason", None) or "", "stop")
    if calls and finish in ("stop", "error"):
        finish = "tool_calls"
    elif not calls and finish == "tool_calls":
        finish = "stop"  # the only call was the answer
    return ModelResponse(
        content=tuple(content),
        usage=usage_of(getattr(response, "usage", None), price),
        finish_reason=finish,
        model_id=getattr(response, "model_name", None) or model_id,
    )


def _args_dict(args: Any) -> dict[str, Any]:
    if isinstance(args, dict):
        return dict(args)
    if args is None:
        return {}
    return parse_arguments(str(args))


def _args_text(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(args or {}, ensure_ascii=False)


# -- streams ----------------------------------------------------------------------------------


@dataclass
class StreamState:
    """Turns Pydantic AI's part events into our deltas.

    Parts are tracked by their index so that a delta of a tool call carries the
    call's id and name; fragments of the output tool (the structured answer) are
    text deltas, as the answer is the response text.
    """

    output_tool: str | None
    calls: dict[int, tuple[str, str]] = field(default_factory=dict)

    def feed(self, event: Any) -> list[ModelStreamEvent]:
        """The deltas of one ``ModelResponseStreamEvent``."""
        kind = getattr(event, "event_kind", None)
        if kind == "part_start":
            return self._start(event.index, event.part)
        if kind == "part_delta":
            return self._delta(event.index, event.delta)
        return []

    def _start(self, index: int, part: Any) -> list[ModelStreamEvent]:
        kind = getattr(part, "part_kind", None)
        if kind == "text":
            return [TextDeltaEvent(delta=part.content)] if part.content else []
        if kind == "tool-call":
            self.calls[index] = (part.tool_call_id, part.tool_name)
            return self._args(index, part.args)
        return []

    def _delta(self, index: int, delta: Any) -> list[ModelStreamEvent]:
        kind = getattr(delta, "part_delta_kind", None)
        if kind == "text":
            return [TextDeltaEvent(delta=delta.content_delta)] if delta.content_delta else []
        if kind == "tool_call" and index in self.calls:
            call_id, name = self.calls[index]
            self.calls[index] = (
                getattr(delta, "tool_call_id", None) or call_id,
                name + (getattr(delta, "tool_name_delta", None) or ""),
            )
            return self._args(index, getattr(delta, "args_delta", None))
        return []

    def _args(self, index: int, args: Any) -> list[ModelStreamEvent]:
        if not args:
            return []
        fragment = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        call_id, name = self.calls[index]
        if self.output_tool is not None and name == self.output_tool:
            return [TextDeltaEvent(delta=fragment)]
        return [ToolCallDeltaEvent(tool_call_id=call_id, tool_name=name, args_delta=fragment)]
