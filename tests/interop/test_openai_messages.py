"""to_openai / from_openai are lossless over the openai SDK's Chat Completions message types.

Conversations are drawn (hypothesis) field by field from the SDK's own TypedDicts
(every key each one declares, except what nbdurable refuses), checked against the
SDK's types with pydantic, and must come back from ``to_openai(from_openai(...))``
exactly. The SDK's response objects (``ChatCompletionMessage``) are read as they are.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("openai")

from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionContentPartImageParam,
    ChatCompletionContentPartRefusalParam,
    ChatCompletionContentPartTextParam,
    ChatCompletionDeveloperMessageParam,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.chat.chat_completion_content_part_image_param import ImageURL
from pydantic import TypeAdapter

import nbdurable as nd
from nbdurable.messages import from_openai, to_openai

REFUSED = {
    ChatCompletionAssistantMessageParam: {"function_call"},  # the legacy form: refused
}
"""Keys of the SDK's types that nbdurable refuses (docs/interop.md lists them)."""

text = st.text(max_size=12)
ident = st.text(alphabet="abcdefghij0123456789_", min_size=1, max_size=8)
json_object_text = st.dictionaries(ident, st.integers() | text, max_size=3).map(
    lambda d: __import__("json").dumps(d)
)
cache_breakpoint = st.sampled_from([{"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}])

text_part = st.fixed_dictionaries(
    {"type": st.just("text"), "text": text},
    optional={"prompt_cache_breakpoint": cache_breakpoint},
)
refusal_part = st.fixed_dictionaries({"type": st.just("refusal"), "refusal": text})
image_url = st.fixed_dictionaries(
    {"url": st.sampled_from(["https://example.org/a.png", "data:image/png;base64,iVBORw0KGgo="])},
    optional={"detail": st.sampled_from(["auto", "low", "high", "original"])},
)
image_part = st.fixed_dictionaries(
    {"type": st.just("image_url"), "image_url": image_url},
    optional={"prompt_cache_breakpoint": cache_breakpoint},
)
instructions_content = text | st.lists(text_part, min_size=1, max_size=3)

STRATEGIES: dict[Any, dict[str, st.SearchStrategy[Any]]] = {
    ChatCompletionSystemMessageParam: {"content": instructions_content, "name": ident},
    ChatCompletionDeveloperMessageParam: {"content": instructions_content, "name": ident},
    ChatCompletionUserMessageParam: {
        "content": text | st.lists(text_part | image_part, min_size=1, max_size=3),
        "name": ident,
    },
    ChatCompletionAssistantMessageParam: {
        "content": st.none() | text | st.lists(text_part | refusal_part, min_size=1, max_size=2),
        "refusal": st.none() | text,
        "name": ident,
        "audio": st.fixed_dictionaries({"id": ident}),
    },
    ChatCompletionToolMessageParam: {"content": text | st.lists(text_part, min_size=1, max_size=2)},
}
"""Every optional key of each message type (role, tool_calls and tool_call_id are drawn below)."""

ROLES = {
    ChatCompletionSystemMessageParam: "system",
    ChatCompletionDeveloperMessageParam: "developer",
    ChatCompletionUserMessageParam: "user",
    ChatCompletionAssistantMessageParam: "assistant",
}


def keys(typed_dict: Any) -> set[str]:
    return set(typing.get_type_hints(typed_dict))


def test_the_strategies_draw_every_field_the_sdk_types_declare() -> None:
    drawn_elsewhere = {"role", "tool_calls", "tool_call_id"}
    for typed_dict, fields in STRATEGIES.items():
        expected = keys(typed_dict) - REFUSED.get(typed_dict, set()) - drawn_elsewhere
        assert set(fields) == expected, typed_dict.__name__
    assert keys(ChatCompletionContentPartTextParam) == {"type", "text", "prompt_cache_breakpoint"}
    assert keys(ChatCompletionContentPartImageParam) == {
        "type",
        "image_url",
        "prompt_cache_breakpoint",
    }
    assert keys(ChatCompletionContentPartRefusalParam) == {"type", "refusal"}
    assert keys(ImageURL) == {"url", "detail"}
    assert keys(ChatCompletionMessageFunctionToolCallParam) == {"id", "type", "function"}


def message(typed_dict: Any, role: str) -> st.SearchStrategy[dict[str, Any]]:
    fields = STRATEGIES[typed_dict]
    # content is required but in an assistant message (pydantic checks against the SDK below)
    required = {} if typed_dict is ChatCompletionAssistantMessageParam else {"content"}
    return st.fixed_dictionaries(
        {"role": st.just(role), **{k: v for k, v in fields.items() if k in required}},
        optional={k: v for k, v in fields.items() if k not in required},
    )


@st.composite
def conversation(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from([*ROLES, "assistant+tools"]))
        if kind != "assistant+tools":
            out.append(draw(message(kind, ROLES[kind])))
            continue
        item = draw(message(ChatCompletionAssistantMessageParam, "assistant"))
        ids = [f"call_{n}_{i}" for i in range(draw(st.integers(1, 2)))]
        item["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": draw(ident), "arguments": draw(json_object_text)},
            }
            for call_id in ids
        ]
        out.append(item)
        for call_id in ids:
            tool = draw(message(ChatCompletionToolMessageParam, "tool"))
            out.append({**tool, "tool_call_id": call_id})
    return out


MESSAGES = TypeAdapter(list[ChatCompletionMessageParam])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation())
def test_every_conversation_of_the_sdk_types_round_trips_exactly(raw: list[dict[str, Any]]) -> None:
    MESSAGES.validate_python(raw)  # what was drawn is of the SDK's types
    messages = from_openai(raw)
    assert to_openai(messages) == raw
    # and survives the store: metadata is JSON, the messages re-validate
    stored = [nd.Message.model_validate_json(m.model_dump_json()) for m in messages]
    assert to_openai(stored) == raw


def test_a_refusal_keeps_its_null_content_and_reads_as_the_assistants_text() -> None:
    raw = [{"role": "assistant", "content": None, "refusal": "I can't help with that."}]
    [message] = from_openai(raw)
    assert message.text == "I can't help with that."
    assert to_openai([message]) == raw


def test_an_images_detail_comes_back() -> None:
    raw = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://example.org/a.png", "detail": "high"},
                },
            ],
        }
    ]
    [message] = from_openai(raw)
    assert message.content[1] == nd.ImagePart(url="https://example.org/a.png")
    assert to_openai([message]) == raw


def test_an_edited_message_is_written_from_its_parts() -> None:
    raw = [{"role": "user", "content": "hi", "name": "ann"}]
    [message] = from_openai(raw)
    edited = message.model_copy(update={"content": (nd.TextPart(text="hello"),)})
    assert to_openai([edited]) == [{"role": "user", "content": "hello"}]


def test_the_sdks_own_response_objects_are_read() -> None:
    sdk = ChatCompletionMessage.model_validate(
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": [],
            "audio": None,
            "function_call": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "count", "arguments": '{"table": "a"}'},
                }
            ],
        }
    )
    [message] = from_openai([sdk])
    assert message.tool_calls[0].args == {"table": "a"}
    assert to_openai([message]) == [sdk.model_dump(mode="json", exclude_unset=True)]
    refusal = ChatCompletionMessage(role="assistant", content=None, refusal="No.")
    [refused] = from_openai([refusal])
    assert refused.text == "No."
    assert to_openai([refused]) == [{"role": "assistant", "content": None, "refusal": "No."}]


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "type": "custom", "custom": {"name": "f", "input": "x"}}
                    ],
                }
            ],
            "custom",
        ),
        ([{"role": "user", "content": "hi", "extra": object()}], "not JSON"),
    ],
)
def test_what_cannot_be_carried_is_refused(bad: list[Any], match: str) -> None:
    with pytest.raises(nd.ConfigurationError, match=match):
        from_openai(bad)
