"""Our requests as LangChain messages and tools, its ``AIMessage``s and chunks as ours.

LangChain is reached through the modules in :class:`LangChain` (typed ``Any``),
so this file imports without the extra.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from .._extras import import_for
from .._media import ResultImage, result_media, sniff_media_type
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
from ._openai_stream import StreamedCall
from ._openai_wire import new_call_id, pictures_heading
from ._pricing import Price, cost_of

__all__ = [
    "RESULT_IMAGES",
    "LangChain",
    "ResultImages",
    "StreamState",
    "load",
    "messages_of",
    "response_of",
    "text_of",
    "tools_of",
    "usage_of",
]

ResultImages = Literal["tool", "message", "text"]
"""Where a tool result's pictures go: inside its ``ToolMessage``, in a message after, or as text."""

RESULT_IMAGES: tuple[ResultImages, ...] = ("tool", "message", "text")

_OUTPUT_DESCRIPTION = "Give the final answer: call this with the answer as its arguments."

# Finish reasons as the providers' LangChain integrations report them in
# ``response_metadata`` (OpenAI, Anthropic, Google, Ollama, Bedrock, ...).
_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_calls": "tool_calls",
    "tool_use": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "max_tokens": "length",
    "content_filter": "content_filter",
    "refusal": "content_filter",
    "safety": "content_filter",
}


@dataclass(frozen=True)
class LangChain:
    """The langchain_core modules the adapter uses."""

    messages: Any
    chat_models: Any
    exceptions: Any


def load(what: str) -> LangChain:
    """Import langchain_core, or raise :class:`ConfigurationError` naming the extra."""
    return LangChain(
        messages=import_for("langchain", what, "langchain_core.messages"),
        chat_models=import_for("langchain", what, "langchain_core.language_models.chat_models"),
        exceptions=import_for("langchain", what, "langchain_core.exceptions"),
    )


# -- requests ---------------------------------------------------------------------------------


def messages_of(
    request: ModelRequest, lc: LangChain, result_images: ResultImages = "tool"
) -> list[Any]:
    """The history as LangChain messages, the instructions first as a system message.

    A tool result of text and pictures (an MCP tool's) goes, by ``result_images``:
    ``"tool"``, as text and standard image blocks in its ``ToolMessage`` (which
    Anthropic, Google and OpenAI's Responses API integrations send as images);
    ``"message"``, as its text there, saying where its pictures are, and the
    pictures as image blocks of one ``HumanMessage`` after the turn's tool
    messages (for a provider whose tool messages hold text only: OpenAI's Chat
    Completions); ``"text"``, as JSON text.
    """
    m = lc.messages
    out: list[Any] = []
    if request.instructions:
        out.append(m.SystemMessage(content=request.instructions))
    pictures: list[dict[str, Any]] = []  # of the tool messages since the last other message
    for message in request.messages:
        if message.role != "tool" and pictures:
            out.append(m.HumanMessage(content=pictures))
            pictures = []
        if message.role == "system":
            out.append(m.SystemMessage(content=message.text))
        elif message.role == "user":
            out.append(m.HumanMessage(content=_user_content(message)))
        elif message.role == "assistant":
            out.append(_ai_message(message, m))
        else:
            out.extend(
                _tool_message(result, m, result_images, pictures) for result in message.tool_results
            )
    if pictures:
        out.append(m.HumanMessage(content=pictures))
    return out


def _user_content(message: Message) -> str | list[str | dict[str, Any]]:
    if all(isinstance(p, TextPart) for p in message.content):
        return message.text
    blocks: list[str | dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            blocks.append(_image_block(part))
    return blocks


def _image_block(part: ImagePart) -> dict[str, Any]:
    # LangChain's standard (provider-neutral) image block; each integration
    # turns it into its provider's format.
    if part.url is not None:
        block: dict[str, Any] = {"type": "image", "url": part.url}
        if part.media_type:
            block["mime_type"] = part.media_type
        return block
    data = part.data or b""
    return {
        "type": "image",
        "base64": base64.b64encode(data).decode("ascii"),
        "mime_type": part.media_type or sniff_media_type(data),
    }


def _ai_message(message: Message, m: Any) -> Any:
    calls: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    for call in message.tool_calls:
        raw = call.args.get(INVALID_ARGS_KEY)
        if len(call.args) == 1 and isinstance(raw, str):  # send back what the model wrote
            invalid.append(
                {
                    "type": "invalid_tool_call",
                    "name": call.tool_name,
                    "args": raw,
                    "id": call.tool_call_id,
                    "error": None,
                }
            )
        else:
            calls.append(
                {
                    "type": "tool_call",
                    "name": call.tool_name,
                    "args": dict(call.args),
                    "id": call.tool_call_id,
                }
            )
    return m.AIMessage(content=message.text, tool_calls=calls, invalid_tool_calls=invalid)


def _tool_message(
    result: ToolResultPart, m: Any, result_images: ResultImages, pictures: list[dict[str, Any]]
) -> Any:
    value = result.result
    media = None if result_images == "text" else result_media(value)
    content: str | list[dict[str, Any]]
    if media is None:
        content = (
            value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        )
    else:
        content = _with_pictures(result, media, result_images, pictures)
    if result.is_error:
        # Not every integration sends ``status`` on (ChatOpenAI does not): say it in the text too.
        if isinstance(content, str):
            content = f"Error: {content}"
        else:
            content = [{"type": "text", "text": "Error:"}, *content]
    return m.ToolMessage(
        content=content,
        tool_call_id=result.tool_call_id,
        name=result.tool_name,
        status="error" if result.is_error else "success",
    )


def _with_pictures(
    result: ToolResultPart,
    media: list[str | ResultImage],
    result_images: ResultImages,
    pictures: list[dict[str, Any]],
) -> str | list[dict[str, Any]]:
    """A result of text and pictures as a ``ToolMessage``'s content (see :func:`messages_of`)."""
    images = [
        {"type": "image", "base64": item.data, "mime_type": item.media_type}
        for item in media
        if isinstance(item, ResultImage)
    ]
    if result_images == "tool":
        return [
            {"type": "text", "text": item} if isinstance(item, str) else images.pop(0)
            for item in media
        ]
    count = f"{len(images)} image{'' if len(images) == 1 else 's'}"
    pictures.append({"type": "text", "text": pictures_heading(result, count)})
    pictures.extend(images)
    texts = [item for item in media if isinstance(item, str)]
    return "\n".join([*texts, f"[{count}: in the user message after the tool results]"])


def tools_of(request: ModelRequest) -> tuple[list[dict[str, Any]], str | None]:
    """The tools for ``bind_tools``, and the ``tool_choice`` of structured output.

    Tools go in OpenAI's function format, which ``bind_tools`` takes for every
    provider; the choice forces the answer tool when there is one.
    """
    tools = [_function(spec.name, spec.description, spec.parameters) for spec in request.tools]
    if request.output_schema is None:
        return tools, None
    tools.append(_function(request.output_name, _OUTPUT_DESCRIPTION, request.output_schema))
    # Alone, the answer tool is forced by name; beside the run's tools, any call is
    # required (the model calls tools, then answers through the answer tool).
    return tools, "any" if request.tools else request.output_name


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


# -- responses --------------------------------------------------------------------------------


def text_of(message: Any) -> str:
    """The text of a message or chunk: string content, or its text blocks joined."""
    text = getattr(message, "text", None)
    if isinstance(text, str):
        return str(text)
    if callable(text):  # langchain-core before 1.0: a method
        return str(text())
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return "".join(
        block.get("text", "")
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    )


def usage_of(metadata: Any, price: Price | None) -> Usage:
    """``usage_metadata`` (LangChain's ``UsageMetadata``) as our usage, priced from the table.

    Its ``input_tokens`` include the cache reads and writes
    (``input_token_details.cache_read`` / ``cache_creation``), as ours do.
    """
    if not metadata:
        return Usage()
    prompt = int(metadata.get("input_tokens") or 0)
    completion = int(metadata.get("output_tokens") or 0)
    details = metadata.get("input_token_details") or {}
    cached = details.get("cache_read")
    written = int(details.get("cache_creation") or 0)
    counted = Usage(
        input_tokens=prompt,
        output_tokens=completion,
        total_tokens=int(metadata.get("total_tokens") or 0) or prompt + completion,
        cached_input_tokens=None if cached is None else int(cached),
    )
    return counted.model_copy(update={"cost": cost_of(counted, price, cache_write_tokens=written)})


def _finish(metadata: dict[str, Any], has_calls: bool) -> FinishReason:
    raw = None
    for key in ("finish_reason", "stop_reason", "done_reason"):
        if metadata.get(key):
            raw = str(metadata[key]).lower()
            break
    finish = _FINISH.get(raw, "other") if raw is not None else "stop"
    if has_calls and finish in ("stop", "other"):
        return "tool_calls"
    if not has_calls and finish == "tool_calls":
        return "stop"  # the only call was the answer of structured output
    return finish


@dataclass(frozen=True)
class _Call:
    tool_call_id: str
    name: str
    args: dict[str, Any]


def response_of(
    message: Any,
    *,
    calls: list[_Call] | None = None,
    output_tool: str | None,
    price: Price | None,
    model_id: str,
) -> ModelResponse:
    """An ``AIMessage`` (or the sum of a stream's chunks) as our response.

    ``calls`` replaces the message's own tool calls (a stream assembles its own,
    with the ids its deltas carried). A call of ``output_tool`` is the structured
    answer: its arguments become the response text.
    """
    if calls is None:
        calls = _calls_of(message)
    answer = next((c for c in calls if output_tool is not None and c.name == output_tool), None)
    tool_calls = [c for c in calls if c is not answer]
    text = json.dumps(answer.args, ensure_ascii=False) if answer is not None else text_of(message)
    content: list[Part] = [TextPart(text=text)] if text else []
    content.extend(
        ToolCallPart(tool_call_id=c.tool_call_id, tool_name=c.name, args=c.args) for c in tool_calls
    )
    metadata = dict(getattr(message, "response_metadata", None) or {})
    return ModelResponse(
        content=tuple(content),
        usage=usage_of(getattr(message, "usage_metadata", None), price),
        finish_reason=_finish(metadata, bool(tool_calls)),
        model_id=metadata.get("model_name") or metadata.get("model") or model_id,
    )


def _calls_of(message: Any) -> list[_Call]:
    calls = [
        _Call(call.get("id") or new_call_id(), call["name"], dict(call.get("args") or {}))
        for call in getattr(message, "tool_calls", None) or ()
    ]
    calls += [
        _Call(
            call.get("id") or new_call_id(),
            call.get("name") or "",
            parse_arguments(call.get("args") or ""),
        )
        for call in getattr(message, "invalid_tool_calls", None) or ()
    ]
    return calls


# -- streams ----------------------------------------------------------------------------------


@dataclass
class StreamState:
    """Folds ``astream`` chunks into deltas, and at the end into one response.

    Tool-call chunks are assembled per ``index`` (LangChain's merge key); a call
    without an id from the provider gets one here, used by its deltas and its
    final call alike. A model without streaming yields one whole ``AIMessage``.
    """

    output_tool: str | None
    total: Any = None
    whole: Any = None
    whole_calls: list[_Call] = field(default_factory=list)
    calls: dict[Any, StreamedCall] = field(default_factory=dict)

    def feed(self, chunk: Any) -> list[ModelStreamEvent]:
        """Take one chunk; return its deltas."""
        if not hasattr(chunk, "tool_call_chunks"):  # a complete AIMessage
            self.whole = chunk
            return self._whole(chunk)
        self.total = chunk if self.total is None else self.total + chunk
        events: list[ModelStreamEvent] = []
        text = text_of(chunk)
        if text:
            events.append(TextDeltaEvent(delta=text))
        for position, piece in enumerate(chunk.tool_call_chunks or ()):
            events.extend(self._piece(piece, position))
        return events

    def _whole(self, message: Any) -> list[ModelStreamEvent]:
        events: list[ModelStreamEvent] = []
        text = text_of(message)
        if text:
            events.append(TextDeltaEvent(delta=text))
        self.whole_calls = _calls_of(message)
        for call in self.whole_calls:
            fragment = json.dumps(call.args, ensure_ascii=False)
            events.append(self._event(call.tool_call_id, call.name, fragment))
        return events

    def _piece(self, piece: dict[str, Any], position: int) -> list[ModelStreamEvent]:
        index = piece.get("index")
        index = position if index is None else index
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = StreamedCall(piece.get("id") or new_call_id())
        fragments = call.take(piece.get("name"), piece.get("args") or "")
        return [self._event(call.tool_call_id, call.name, text) for text in fragments]

    def _event(self, call_id: str, name: str, fragment: str) -> ModelStreamEvent:
        if self.output_tool is not None and name == self.output_tool:
            return TextDeltaEvent(delta=fragment)
        return ToolCallDeltaEvent(tool_call_id=call_id, tool_name=name, args_delta=fragment)

    def response(self, *, price: Price | None, model_id: str) -> ModelResponse:
        """The complete turn."""
        if self.whole is not None or self.total is None:
            return response_of(
                self.whole,
                calls=self.whole_calls,
                output_tool=self.output_tool,
                price=price,
                model_id=model_id,
            )
        calls = [
            _Call(c.tool_call_id, c.name, parse_arguments(c.text)) for c in self.calls.values()
        ]
        return response_of(
            self.total, calls=calls, output_tool=self.output_tool, price=price, model_id=model_id
        )
