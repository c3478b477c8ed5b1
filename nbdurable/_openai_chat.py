"""Messages to and from OpenAI's Chat Completions message format (plain dicts).

The format is the lingua franca of chat histories: eval tools, fine-tuning files
and most frameworks read and write it. :func:`to_openai` writes only standard
fields; :func:`from_openai` reads what OpenAI documents for requests (plus the
``developer`` role and ``refusal`` parts) and refuses what has no nbdurable
form with a :class:`~nbdurable.ConfigurationError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ._errors import ConfigurationError
from ._media import data_url, parse_data_url
from .messages import (
    ImagePart,
    Message,
    Part,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)

__all__ = ["INVALID_ARGS_KEY", "from_openai", "parse_arguments", "to_openai"]

INVALID_ARGS_KEY = "invalid_json_arguments"
"""Arguments that are not a JSON object are kept under this key (the tool then rejects them)."""

ERROR_PREFIX = "Error: "
"""How an ``is_error`` tool result reads in the format, which has no error flag."""


def parse_arguments(text: str) -> dict[str, Any]:
    """A call's JSON arguments as a dict ("" is no arguments; not an object: kept raw)."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {INVALID_ARGS_KEY: text}
    return value if isinstance(value, dict) else {INVALID_ARGS_KEY: text}


def arguments_text(args: Mapping[str, Any]) -> str:
    """A call's arguments as the JSON text of the format (raw text kept as it was)."""
    raw = args.get(INVALID_ARGS_KEY)
    if len(args) == 1 and isinstance(raw, str):
        return raw  # send back exactly what the model wrote
    return json.dumps(dict(args), ensure_ascii=False)


# -- to -----------------------------------------------------------------------------------


def to_openai(messages: Message | Iterable[Message]) -> list[dict[str, Any]]:
    """Messages as Chat Completions message dicts.

    System and user messages keep their role (a user message with only text has
    string content, else a list of ``text`` and ``image_url`` parts; image bytes
    become ``data:`` URLs); an assistant message has its text (``null`` beside
    tool calls with no text) and ``tool_calls`` with JSON-text arguments; a tool
    message becomes one ``tool`` message per result (strings as is, other values
    as JSON, ``is_error`` results prefixed ``"Error: "``). Approval bookkeeping
    and metadata are not part of the format and are left out.

    Raises:
        ConfigurationError: An image outside a user message (the format has no place for it).
    """
    items = [messages] if isinstance(messages, Message) else list(messages)
    out: list[dict[str, Any]] = []
    for message in items:
        if not isinstance(message, Message):
            raise ConfigurationError(f"to_openai takes nbdurable Messages, not {message!r}")
        out.extend(_to(message))
    return out


def _to(message: Message) -> list[dict[str, Any]]:
    if message.role != "user":
        for part in message.content:
            if isinstance(part, ImagePart):
                raise ConfigurationError(
                    f"an image in a {message.role} message has no OpenAI chat form"
                )
    if message.role == "tool":
        return [_tool_result(part) for part in message.tool_results]
    if message.role == "assistant":
        return [_assistant(message)]
    if message.role == "system":
        return [{"role": "system", "content": message.text}]
    return [{"role": "user", "content": _user_content(message.content)}]


def _assistant(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": message.text or None}
    calls = message.tool_calls
    if calls:
        out["tool_calls"] = [
            {
                "id": call.tool_call_id,
                "type": "function",
                "function": {"name": call.tool_name, "arguments": arguments_text(call.args)},
            }
            for call in calls
        ]
    elif out["content"] is None:
        out["content"] = ""
    return out


def _tool_result(part: ToolResultPart) -> dict[str, Any]:
    result = part.result
    if isinstance(result, str):
        text = result
    else:
        text = json.dumps(result, ensure_ascii=False, default=str)
    if part.is_error:
        text = ERROR_PREFIX + text
    return {"role": "tool", "tool_call_id": part.tool_call_id, "content": text}


def _user_content(parts: tuple[Part, ...]) -> str | list[dict[str, Any]]:
    if all(isinstance(p, TextPart) for p in parts):
        return "".join(p.text for p in parts if isinstance(p, TextPart))
    content: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            content.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            url = part.url if part.url is not None else data_url(part.data or b"", part.media_type)
            content.append({"type": "image_url", "image_url": {"url": url}})
    return content


# -- from ---------------------------------------------------------------------------------


def from_openai(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Chat Completions message dicts as nbdurable messages.

    ``system`` and ``developer`` messages become system messages; user content
    (a string, or ``text`` and ``image_url`` parts: ``data:`` URLs become image
    bytes, other URLs stay URLs); assistant text (``refusal`` parts as text) and
    ``tool_calls`` (arguments parsed; text that is not a JSON object is kept under
    ``"invalid_json_arguments"``); consecutive ``tool`` messages become one tool
    message whose results take their tool names from the calls they answer.
    Results are text, as in the format; ``name`` fields are not kept.

    Raises:
        ConfigurationError: Something the format allows that nbdurable cannot hold
            (audio or file parts, the legacy ``function`` role and ``function_call``),
            an unknown role, or a tool result for a call no earlier assistant made.
    """
    out: list[Message] = []
    names: dict[str, str] = {}
    results: list[ToolResultPart] = []
    for index, item in enumerate(messages):
        if not isinstance(item, Mapping):
            raise ConfigurationError(f"message {index}: a dict, not {item!r}")
        role = item.get("role")
        if role == "tool":
            results.append(_result(item, names, index))
            continue
        if results:
            out.append(Message(role="tool", content=tuple(results)))
            results = []
        if role in ("system", "developer"):
            out.append(Message(role="system", content=_text(item.get("content"), index)))
        elif role == "user":
            out.append(Message(role="user", content=_user_parts(item.get("content"), index)))
        elif role == "assistant":
            message = _assistant_from(item, index)
            names.update({c.tool_call_id: c.tool_name for c in message.tool_calls})
            out.append(message)
        else:
            raise ConfigurationError(f"message {index}: no nbdurable form for the role {role!r}")
    if results:
        out.append(Message(role="tool", content=tuple(results)))
    return out


def _text(content: Any, index: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in _parts_list(content, index):
        kind = part.get("type")
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind == "refusal":
            texts.append(str(part.get("refusal", "")))
        else:
            raise ConfigurationError(f"message {index}: a {kind!r} part where text was expected")
    return "".join(texts)


def _parts_list(content: Any, index: int) -> list[Mapping[str, Any]]:
    if not isinstance(content, list) or not all(isinstance(p, Mapping) for p in content):
        raise ConfigurationError(f"message {index}: content must be a string or a list of parts")
    return content


def _user_parts(content: Any, index: int) -> tuple[Part, ...]:
    if content is None or isinstance(content, str):
        return (TextPart(text=content or ""),)
    parts: list[Part] = []
    for part in _parts_list(content, index):
        kind = part.get("type")
        if kind == "text":
            parts.append(TextPart(text=str(part.get("text", ""))))
        elif kind == "image_url":
            parts.append(_image(part.get("image_url"), index))
        else:
            raise ConfigurationError(f"message {index}: no nbdurable form for a {kind!r} part")
    return tuple(parts)


def _image(value: Any, index: int) -> ImagePart:
    url = value.get("url") if isinstance(value, Mapping) else value
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"message {index}: an image_url part without a url")
    try:
        inline = parse_data_url(url)
    except ValueError as exc:
        raise ConfigurationError(f"message {index}: {exc}") from exc
    if inline is None:
        return ImagePart(url=url)
    data, media_type = inline
    return ImagePart(data=data, media_type=media_type)


def _assistant_from(item: Mapping[str, Any], index: int) -> Message:
    if item.get("function_call") is not None:
        raise ConfigurationError(
            f"message {index}: the legacy function_call has no nbdurable form; use tool_calls"
        )
    parts: list[Part] = []
    text = _text(item.get("content"), index)
    if text or not item.get("tool_calls"):
        parts.append(TextPart(text=text))
    for call in item.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not call.get("id") or not function.get("name"):
            raise ConfigurationError(
                f"message {index}: a tool call needs an id and a function name: {call!r}"
            )
        arguments = function.get("arguments")
        parts.append(
            ToolCallPart(
                tool_call_id=str(call["id"]),
                tool_name=str(function["name"]),
                args=(
                    dict(arguments)
                    if isinstance(arguments, Mapping)
                    else parse_arguments(str(arguments or ""))
                ),
            )
        )
    return Message(role="assistant", content=tuple(parts))


def _result(item: Mapping[str, Any], names: Mapping[str, str], index: int) -> ToolResultPart:
    call_id = item.get("tool_call_id")
    if not isinstance(call_id, str) or call_id not in names:
        raise ConfigurationError(
            f"message {index}: a tool result for {call_id!r}, which no earlier assistant called"
        )
    return ToolResultPart(
        tool_call_id=call_id, tool_name=names[call_id], result=_text(item.get("content"), index)
    )
