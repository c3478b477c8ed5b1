"""Messages to and from OpenAI's Chat Completions message format (plain dicts).

The format is the lingua franca of chat histories: eval tools, fine-tuning files
and most frameworks read and write it. :func:`from_openai` reads the Chat
Completions message types (dicts, or the openai SDK's own objects) and refuses
what has no nbdurable form with a :class:`~nbdurable.ConfigurationError`;
:func:`to_openai` writes standard fields.

Round trips are lossless: what a message holds beyond nbdurable's parts (a
``name``, the ``developer`` role, ``content: null`` beside a ``refusal``, an image's
``detail``, ``annotations``, an ``audio`` reference, content as a list of text
parts, ...) is kept in the message's metadata under :data:`STASH_KEY`, with a
digest of the parts it belongs to; :func:`to_openai` writes the messages as they
came while the parts are unchanged (an edited message is written from its parts).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel

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

__all__ = ["INVALID_ARGS_KEY", "STASH_KEY", "from_openai", "parse_arguments", "to_openai"]

INVALID_ARGS_KEY = "invalid_json_arguments"
"""Arguments that are not a JSON object are kept under this key (the tool then rejects them)."""

STASH_KEY = "openai"
"""Metadata key of what a message read by :func:`from_openai` held beyond its parts:
``{"messages": [the message dicts as read], "parts": digest of their rendering}``."""

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
    and metadata are not part of the format and are left out, except what
    :func:`from_openai` stashed: a message it read, unchanged since, is written
    exactly as it was read.

    Raises:
        ConfigurationError: An image outside a user message (the format has no place for it).
    """
    items = [messages] if isinstance(messages, Message) else list(messages)
    out: list[dict[str, Any]] = []
    for message in items:
        if not isinstance(message, Message):
            raise ConfigurationError(f"to_openai takes nbdurable Messages, not {message!r}")
        out.extend(_written(message))
    return out


def _digest(rendered: list[dict[str, Any]]) -> str:
    canonical = json.dumps(rendered, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _written(message: Message) -> list[dict[str, Any]]:
    rendered = _to(message)
    stash = (message.metadata or {}).get(STASH_KEY)
    if isinstance(stash, Mapping) and stash.get("parts") == _digest(rendered):
        written: list[dict[str, Any]] = json.loads(json.dumps(stash["messages"]))
        return written  # a copy the caller may change
    return rendered


def _stashed(message: Message, originals: list[dict[str, Any]]) -> Message:
    """``message`` with the dicts it was read from, if its rendering differs from them."""
    rendered = _to(message)
    if rendered == originals:
        return message
    stash = {"messages": originals, "parts": _digest(rendered)}
    return message.model_copy(update={"metadata": {STASH_KEY: stash}})


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


def from_openai(messages: Iterable[Mapping[str, Any] | BaseModel]) -> list[Message]:
    """Chat Completions messages (dicts or the openai SDK's objects) as nbdurable messages.

    ``system`` and ``developer`` messages become system messages; user content
    (a string, or ``text`` and ``image_url`` parts: ``data:`` URLs become image
    bytes, other URLs stay URLs); assistant text (a ``refusal``, as a field or as
    parts, is its text) and ``tool_calls`` (arguments parsed; text that is not a
    JSON object is kept under ``"invalid_json_arguments"``); consecutive ``tool``
    messages become one tool message whose results take their tool names from the
    calls they answer. Results are text, as in the format. Whatever else a message
    holds is kept for :func:`to_openai` (see :data:`STASH_KEY`).

    Raises:
        ConfigurationError: Something the format allows that nbdurable cannot hold
            (audio or file parts, the legacy ``function`` role and ``function_call``,
            custom tool calls), an unknown role, or a tool result for a call no
            earlier assistant made.
    """
    out: list[Message] = []
    names: dict[str, str] = {}
    results: list[ToolResultPart] = []
    originals: list[dict[str, Any]] = []

    def flush() -> None:
        if results:
            out.append(_stashed(Message(role="tool", content=tuple(results)), originals[:]))
            results.clear()
            originals.clear()

    for index, given in enumerate(messages):
        item = _plain(given, index)
        role = item.get("role")
        if role == "tool":
            results.append(_result(item, names, index))
            originals.append(item)
            continue
        flush()
        if role in ("system", "developer"):
            message = Message(role="system", content=_text(item.get("content"), index))
        elif role == "user":
            message = Message(role="user", content=_user_parts(item.get("content"), index))
        elif role == "assistant":
            message = _assistant_from(item, index)
            names.update({c.tool_call_id: c.tool_name for c in message.tool_calls})
        else:
            raise ConfigurationError(f"message {index}: no nbdurable form for the role {role!r}")
        out.append(_stashed(message, [item]))
    flush()
    return out


def _plain(item: Any, index: int) -> dict[str, Any]:
    """A message as a JSON dict: SDK objects (pydantic models) as the fields they were given."""
    if isinstance(item, BaseModel):
        item = item.model_dump(mode="json", exclude_unset=True)
    if not isinstance(item, Mapping):
        raise ConfigurationError(f"message {index}: a dict, not {item!r}")
    try:
        plain: dict[str, Any] = json.loads(json.dumps(dict(item), ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"message {index}: not JSON: {exc}") from exc
    return plain


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
    refusal = item.get("refusal")
    if not text and isinstance(refusal, str):
        text = refusal  # {"content": null, "refusal": "..."}: the refusal is what it said
    if text or not item.get("tool_calls"):
        parts.append(TextPart(text=text))
    for call in item.get("tool_calls") or ():
        if isinstance(call, Mapping) and call.get("type") == "custom":
            raise ConfigurationError(
                f"message {index}: a custom (free-text) tool call has no nbdurable form"
            )
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
