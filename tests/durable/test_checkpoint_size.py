"""CheckpointSize counts a checkpoint's JSON bytes exactly, encoding only new messages."""

from __future__ import annotations

import pytest

import nbdurable as nd
from nbdurable.durable._checkpoint_size import CheckpointSize


def _history() -> tuple[nd.Message, ...]:
    return (
        nd.user("Grüße — 你好 \U0001f600"),
        nd.assistant([nd.ToolCallPart(tool_call_id="c1", tool_name="t", args={"k": "ü"})]),
        nd.tool_message([nd.ToolResultPart(tool_call_id="c1", tool_name="t", result={"x": 1})]),
        nd.user([nd.ImagePart(data=b"\x89PNG\x00\xff", media_type="image/png")]),
    )


def _cp(messages: tuple[nd.Message, ...], step: int) -> nd.AgentCheckpoint:
    return nd.AgentCheckpoint(
        run_id="r", step_index=step, status="running", messages=messages, created_at=7
    )


def _exact(cp: nd.AgentCheckpoint) -> int:
    return len(cp.model_dump_json().encode("utf-8"))


@pytest.mark.parametrize("count", [0, 1, 4])
def test_the_size_is_the_bytes_of_the_whole_json(count: int) -> None:
    cp = _cp(_history()[:count], 0)
    assert CheckpointSize().measure(cp) == _exact(cp)


def test_an_extension_encodes_only_its_tail_and_stays_exact() -> None:
    size = CheckpointSize()
    first = _history()[:2]
    assert size.measure(_cp(first, 0)) == _exact(_cp(first, 0))
    longer = first + _history()[2:]
    cp = _cp(longer, 1)
    assert size.measure(cp, extends=first) == _exact(cp)
    # A hint that is not the history measured last is ignored: still exact.
    edited = (nd.user("other, longer first message"), *longer[1:])
    cp2 = _cp(edited, 2)
    assert size.measure(cp2, extends=first) == _exact(cp2)


def test_a_history_a_sqlite_store_loaded_is_measured_by_its_stored_texts(tmp_path) -> None:
    store = nd.SqliteSessionStore(tmp_path / "s.db")
    store.save(_cp(_history(), 0))
    store.close()
    fresh = nd.SqliteSessionStore(tmp_path / "s.db")
    loaded = fresh.load("r")
    fresh.close()
    assert loaded is not None
    start = nd.History.of(loaded.messages)  # what the loop starts from: the same objects
    longer = start.appended(nd.assistant("Done."))
    cp = _cp(tuple(longer), 1)
    size = CheckpointSize()
    # The noted bytes stand in for encoding the loaded messages: the size stays exact.
    assert size.measure(cp, extends=start) == _exact(cp)
