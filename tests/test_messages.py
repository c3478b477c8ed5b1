"""nbdurable.messages.to_openai / from_openai: the OpenAI Chat Completions message format."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbdurable as nd
from nbdurable.messages import from_openai, to_openai

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
JPEG_URL = "https://example.org/cat.jpg"


def conversation() -> list[nd.Message]:
    return [
        nd.system("You are a data bot."),
        nd.user(["What is in these?", nd.ImagePart(data=PNG, media_type="image/png")]),
        nd.user(["And this one?", nd.ImagePart(url=JPEG_URL)]),
        nd.assistant(
            [
                "Let me look.",
                nd.ToolCallPart(tool_call_id="call_1", tool_name="count", args={"table": "a"}),
                nd.ToolCallPart(tool_call_id="call_2", tool_name="count", args={}),
            ]
        ),
        nd.tool_message(
            [
                nd.ToolResultPart(tool_call_id="call_1", tool_name="count", result="12 rows"),
                nd.ToolResultPart(tool_call_id="call_2", tool_name="count", result="0 rows"),
            ]
        ),
        nd.assistant([nd.ToolCallPart(tool_call_id="call_3", tool_name="count", args={"n": 1})]),
        nd.tool_message([nd.ToolResultPart(tool_call_id="call_3", tool_name="count", result="1")]),
        nd.assistant("Table a has 12 rows."),
    ]


OPENAI = [
    {"role": "system", "content": "You are a data bot."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in these?"},
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAAAAAAAAA=="},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "And this one?"},
            {"type": "image_url", "image_url": {"url": JPEG_URL}},
        ],
    },
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "count", "arguments": '{"table": "a"}'},
            },
            {"id": "call_2", "type": "function", "function": {"name": "count", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "12 rows"},
    {"role": "tool", "tool_call_id": "call_2", "content": "0 rows"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_3",
                "type": "function",
                "function": {"name": "count", "arguments": '{"n": 1}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_3", "content": "1"},
    {"role": "assistant", "content": "Table a has 12 rows."},
]


def test_to_openai_writes_the_chat_completions_format() -> None:
    assert to_openai(conversation()) == OPENAI
    json.dumps(OPENAI)  # plain JSON: a fine-tuning or eval file takes it as is


def test_messages_round_trip_through_the_format() -> None:
    assert from_openai(to_openai(conversation())) == conversation()
    assert to_openai(from_openai(OPENAI)) == OPENAI


def test_a_single_message_converts_too() -> None:
    assert to_openai(nd.user("hi")) == [{"role": "user", "content": "hi"}]


def test_what_the_format_cannot_hold_is_written_as_the_model_saw_it() -> None:
    request = nd.ToolApprovalRequest(
        approval_id="ap1", tool_call_id="c1", tool_name="drop", input={"t": "x"}
    )
    history = [
        nd.Message(
            role="assistant",
            content=(
                nd.ToolCallPart(tool_call_id="c1", tool_name="drop", args={"t": "x"}),
                nd.messages.ApprovalRequestPart(request=request),
            ),
            metadata={"kept": "no"},
        ),
        nd.tool_message(
            [
                nd.ToolResultPart(
                    tool_call_id="c1", tool_name="drop", result="denied", is_error=True
                ),
                nd.ToolResultPart(tool_call_id="c2", tool_name="q", result={"rows": [1, 2]}),
            ]
        ),
        nd.user([nd.ImagePart(data=PNG)]),  # no media type: sniffed
    ]
    assert to_openai(history) == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "drop", "arguments": '{"t": "x"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Error: denied"},
        {"role": "tool", "tool_call_id": "c2", "content": '{"rows": [1, 2]}'},
        {
            "role": "user",
            "content": [
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAAAAAAAAA=="},
                }
            ],
        },
    ]


def test_arguments_that_are_not_json_stay_as_written() -> None:
    raw = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}
            ],
        }
    ]
    [message] = from_openai(raw)
    assert message.tool_calls[0].args == {"invalid_json_arguments": "{oops"}
    assert to_openai([message]) == raw


def test_from_openai_reads_the_formats_variants() -> None:
    raw = [
        {
            "role": "developer",
            "content": [{"type": "text", "text": "Be "}, {"type": "text", "text": "terse."}],
        },
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": "https://example.org/x.png"}],
            "name": "ann",
        },
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]},
        {"role": "user", "content": None},
    ]
    messages = from_openai(raw)
    # the parts; what the format said beyond them (developer, name, parts) is in metadata
    assert [(m.role, m.content) for m in messages] == [
        (m.role, m.content)
        for m in [
            nd.system("Be terse."),
            nd.user([nd.ImagePart(url="https://example.org/x.png")]),
            nd.assistant("I can't."),
            nd.user(""),
        ]
    ]
    assert to_openai(messages) == raw


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (
            [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
            "input_audio",
        ),
        ([{"role": "user", "content": [{"type": "file", "file": {}}]}], "'file'"),
        ([{"role": "function", "name": "f", "content": "x"}], "role 'function'"),
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "f", "arguments": "{}"},
                }
            ],
            "function_call",
        ),
        ([{"role": "critic", "content": "x"}], "role 'critic'"),
        ([{"role": "tool", "tool_call_id": "nobody", "content": "x"}], "no earlier assistant"),
        (
            [{"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}],
            "an id and a function name",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}
                    ],
                }
            ],
            "base64",
        ),
        ([{"role": "user", "content": {"text": "not a list"}}], "string or a list"),
        (["user: hi"], "a dict"),
    ],
)
def test_from_openai_refuses_what_has_no_nbdurable_form(bad: list[Any], match: str) -> None:
    with pytest.raises(nd.ConfigurationError, match=match):
        from_openai(bad)


def test_to_openai_refuses_an_image_outside_a_user_message() -> None:
    with pytest.raises(nd.ConfigurationError, match="assistant"):
        to_openai([nd.Message(role="assistant", content=(nd.ImagePart(url=JPEG_URL),))])
    with pytest.raises(nd.ConfigurationError, match="Messages"):
        to_openai([{"role": "user", "content": "hi"}])  # type: ignore[list-item]


async def test_a_conversation_from_elsewhere_seeds_a_run_and_the_run_goes_back_out() -> None:
    seed = [*from_openai(OPENAI), nd.user("And table b?")]
    result = await nd.generate_text(
        model=nd.ScriptedModel(["Table b is empty."], mode="sequential"), messages=seed
    )
    out = to_openai(result.messages)
    assert out[: len(OPENAI)] == OPENAI
    assert out[-2:] == [
        {"role": "user", "content": "And table b?"},
        {"role": "assistant", "content": "Table b is empty."},
    ]


# -- any representable conversation survives the round trip -----------------------------------

_text = st.text(min_size=1, max_size=20)
_args = st.dictionaries(
    st.text(min_size=1, max_size=5),
    st.one_of(st.integers(), st.text(max_size=5), st.booleans()),
    max_size=3,
)
_image = st.one_of(
    st.builds(
        lambda d: nd.ImagePart(data=d, media_type="image/png"), st.binary(min_size=1, max_size=16)
    ),
    st.builds(lambda n: nd.ImagePart(url=f"https://example.org/{n}.png"), st.integers(0, 99)),
)


@st.composite
def _conversations(draw: st.DrawFn) -> list[nd.Message]:
    messages: list[nd.Message] = [nd.system(draw(_text))]
    for turn in range(draw(st.integers(0, 3))):
        parts: list[Any] = [draw(_text), *draw(st.lists(_image, max_size=2))]
        messages.append(nd.user(parts))
        calls = [
            nd.ToolCallPart(tool_call_id=f"c{turn}_{i}", tool_name=draw(_text), args=draw(_args))
            for i in range(draw(st.integers(0, 2)))
        ]
        said = draw(st.one_of(st.just(""), _text))
        if not calls and not said:
            said = "ok"
        messages.append(nd.assistant([*([said] if said else []), *calls]))
        if calls:
            messages.append(
                nd.tool_message(
                    [
                        nd.ToolResultPart(
                            tool_call_id=c.tool_call_id, tool_name=c.tool_name, result=draw(_text)
                        )
                        for c in calls
                    ]
                )
            )
    return messages


@settings(max_examples=60, deadline=None)
@given(_conversations())
def test_any_representable_conversation_round_trips(messages: list[nd.Message]) -> None:
    written = to_openai(messages)
    assert from_openai(json.loads(json.dumps(written))) == messages
