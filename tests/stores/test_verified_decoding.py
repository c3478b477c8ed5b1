"""A load builds hash-verified messages without validating them again: the same messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.messages import ApprovalRequestPart, ImagePart, TextPart, ToolApprovalRequest
from nbdurable.stores._chain import decode_messages, encode_message
from nbdurable.stores._trusted import trusted_messages

HISTORY = (
    nd.system("Be brief."),
    nd.user('Probe it — ünïcode ✓ and "quotes" and \\ backslash'),
    nd.Message(
        role="assistant",
        content=(
            TextPart(text="calling"),
            nd.ToolCallPart(tool_call_id="c1", tool_name="probe", args={"i": 1, "x": [1.5, None]}),
        ),
        metadata={"model": "m", "nested": {"k": [1, 2]}},
    ),
    nd.tool_message(
        [
            nd.ToolResultPart(tool_call_id="c1", tool_name="probe", result={"ok": True}),
            nd.ToolResultPart(tool_call_id="c2", tool_name="p", result="no", is_error=True),
        ]
    ),
    nd.assistant("Done."),
)


def texts(messages: tuple[nd.Message, ...]) -> list[str]:
    return [encode_message(m) for m in messages]


def test_trusted_messages_equal_validated_ones_field_for_field() -> None:
    built = trusted_messages(texts(HISTORY))
    validated = decode_messages(texts(HISTORY), run_id="r", step_index=0)
    assert built is not None
    assert built == validated == HISTORY
    for mine, theirs in zip(built, validated, strict=True):
        assert type(mine) is type(theirs)
        assert mine.model_fields_set == theirs.model_fields_set
        assert encode_message(mine) == encode_message(theirs)  # so the same node hash
        assert all(type(a) is type(b) for a, b in zip(mine.content, theirs.content, strict=True))
        assert isinstance(mine.content, tuple)
    assert hash(built[0].content[0]) == hash(validated[0].content[0])  # frozen parts hash alike


@pytest.mark.parametrize(
    "message",
    [
        nd.user(b"\x89PNG raw image bytes"),
        nd.Message(role="user", content=(ImagePart(url="https://example.com/a.png"),)),
        nd.Message(
            role="assistant",
            content=(
                ApprovalRequestPart(
                    request=ToolApprovalRequest(approval_id="a", tool_call_id="c", tool_name="t")
                ),
            ),
        ),
    ],
)
def test_other_shapes_go_through_full_validation(message: nd.Message) -> None:
    stored = texts((*HISTORY, message))
    assert trusted_messages(stored) is None
    assert decode_messages(stored, run_id="r", step_index=0, verified=True) == (*HISTORY, message)


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(extra_field=1),  # a field this release does not know
        lambda d: d.update(role="robot"),
        lambda d: d["content"][0].update(text=7),
        lambda d: d["content"][0].pop("text"),
    ],
)
def test_an_unexpected_shape_is_validated_and_refused_as_before(edit: object) -> None:
    data = json.loads(encode_message(nd.user("hi")))
    edit(data)  # type: ignore[operator]
    stored = [json.dumps(data)]
    assert trusted_messages(stored) is None
    with pytest.raises(nd.StoreCorruptionError):
        decode_messages(stored, run_id="r", step_index=0, verified=True)


def test_a_shape_only_validation_accepts_is_still_accepted() -> None:
    stored = ['{"role":"user","content":"plain"}']  # no metadata, content a string
    assert trusted_messages(stored) is None
    assert decode_messages(stored, run_id="r", step_index=0, verified=True) == (nd.user("plain"),)


def test_a_lone_surrogate_escape_is_refused_as_before() -> None:
    stored = ['{"role":"user","content":[{"type":"text","text":"a\\ud800b"}],"metadata":null}']
    assert trusted_messages(stored) is None
    with pytest.raises(nd.StoreCorruptionError):
        decode_messages(stored, run_id="r", step_index=0, verified=True)


@pytest.mark.parametrize(
    "regroup",
    [
        lambda a, b: [a + "," + b],  # two messages in one text
        lambda a, b: [a[:20], a[20:], b],  # one message over two texts
        lambda a, b: [a + "," + b[:20], b[20:]],  # boundaries moved, as many texts
        lambda a, b: [a, b + "]"],  # a text that closes the array read in one parse
    ],
)
def test_texts_that_are_not_one_message_each_are_validated_and_refused(regroup: object) -> None:
    """The texts are parsed as one JSON array; each must still be exactly one message."""
    first, second = texts(HISTORY[:2])
    stored = regroup(first, second)  # type: ignore[operator]
    assert trusted_messages(stored) is None
    with pytest.raises(nd.StoreCorruptionError):
        decode_messages(stored, run_id="r", step_index=0, verified=True)


def test_a_cold_load_returns_the_saved_history(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with nd.SqliteSessionStore(db) as store:
        store.save(
            nd.AgentCheckpoint(
                run_id="r", step_index=1, messages=HISTORY, status="completed", created_at=1
            )
        )
    with nd.SqliteSessionStore(db) as fresh:
        loaded = fresh.load("r")
    assert loaded is not None and loaded.messages == HISTORY
