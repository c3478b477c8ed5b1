"""The event printer and follower behind ``approve --agents``, ``resume`` and the demo."""

from __future__ import annotations

import asyncio
import io
import time

import pytest

import nbdurable as nd
from nbdurable.cli._follow import EventPrinter, call_text, follow
from nbdurable.cli._tables import text_width
from nbdurable.events import Event, NewEvent
from nbdurable.runs import RunPatch, RuntimeRun
from nbdurable.runtime import DurableRuntime


def _event(offset: int, type_: str, payload: dict, step: int | None = 0) -> Event:
    return Event(
        run_id="r", offset=offset, type=type_, step_index=step, payload=payload, created_at=0
    )


def test_streamed_text_wraps_at_words_and_never_exceeds_the_width(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "30")
    out = io.StringIO()
    printer = EventPrinter(out)
    words = "the quick brown fox jumps over the lazy dog " * 4
    for i, word in enumerate(words.split(" ")):
        printer.show(_event(i + 1, "model_delta", {"type": "text_delta", "delta": word + " "}))
    printer.show(_event(99, "model_completed", {"response": {"content": []}}))
    lines = out.getvalue().splitlines()
    assert len(lines) > 1 and all(text_width(line) <= 30 for line in lines)
    assert all(line.startswith("  ") and not line.endswith(" ") for line in lines)
    assert " ".join(line.strip() for line in lines) == words.strip()


def test_events_become_readable_lines(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    out = io.StringIO()
    printer = EventPrinter(out)
    call = {"tool_call_id": "c", "tool_name": "drop_table", "args": {"name": "stg"}}
    request = {"approval_id": "a1", "tool_call_id": "c", "tool_name": "drop_table"}
    request["input"] = {"name": "stg"}
    for event in [
        _event(1, "run_state", {"state": "running"}, None),
        _event(2, "model_completed", {"response": {"content": [{"type": "text", "text": "Hi."}]}}),
        _event(3, "tool_call", {"tool_call": call}),
        _event(4, "tool_approval_request", {"request": request}),
        _event(5, "approval_resolved", {"approval_id": "a1", "approved": False, "reason": "no"}),
        _event(
            6,
            "tool_result",
            {"result": {"tool_name": "drop_table", "result": "no", "is_error": True}},
        ),
        _event(7, "checkpoint_saved", {"status": "completed"}, 1),
    ]:
        printer.show(event)
    assert out.getvalue().splitlines() == [
        "  · running",
        "  Hi.",
        "  → drop_table(name='stg')",
        "  ? drop_table(name='stg') needs approval (a1)",
        "  ✗ denied a1: no",
        "  ✗ drop_table: no",
        "  ● checkpoint: step 1 committed (completed)",
    ]


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({}, "f()"),
        ({"name": "stg_2024"}, "f(name='stg_2024')"),
        ({"a": 1, "b": [2]}, "f(a=1, b=[2])"),
    ],
)
def test_call_text_reads_like_python(args: dict, text: str) -> None:
    assert call_text("f", args) == text


async def test_follow_stops_when_the_record_catches_up_with_a_waiting_event(
    tmp_path, monkeypatch
) -> None:
    # A state change appends its run_state event before it writes the record: a
    # follower that reads the record at once may still see "running" and must not
    # keep waiting for events that never come.
    monkeypatch.setenv("COLUMNS", "100")
    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    now = int(time.time() * 1000)
    record = RuntimeRun(
        run_id="r1",
        agent_id="elsewhere",
        agent_version="1",
        session_id="s1",
        prompt='"hi"',
        state="running",
        created_at=now,
        updated_at=now,
        fence=1,
        lease_owner="another-worker",
        lease_expires_at=now + 600_000,  # held by a live owner: never claimed here
    )
    store.rt_insert(record, enqueue=False, max_pending=10)
    wait = {"state": "waiting_approval", "reason": None, "next_attempt_at": None}
    store.append_events("r1", [NewEvent(type="run_state", created_at=now, payload=wait)])
    try:
        async with await DurableRuntime.open(store=store, agents=[], poll_interval=0.02) as rt:
            following = asyncio.create_task(follow(await rt.get_run("r1"), 0, EventPrinter()))
            await asyncio.sleep(0.3)
            assert not following.done()  # the record still says running
            store.rt_update("r1", RunPatch(state="waiting_approval", lease_owner=None), fence=1)
            done = await asyncio.wait_for(following, 10)
        assert done.state == "waiting_approval"
    finally:
        store.close()
