"""A strict AG-UI client for the tests: every SSE message parsed with the official
``ag-ui-protocol`` event models, re-encoded by its ``EventEncoder`` to the very same
bytes, and the sequence checked against the protocol's lifecycle rules."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from ag_ui.core import BaseEvent, Event, EventType
from ag_ui.encoder import EventEncoder
from httpx_sse import connect_sse
from pydantic import TypeAdapter

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)
"""The protocol's discriminated union of every event type."""
ENCODER = EventEncoder()


@dataclass(frozen=True)
class Received:
    """One AG-UI event as the stream sent it."""

    id: str
    event: BaseEvent
    data: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.event.type.value)

    @property
    def position(self) -> tuple[int, int]:
        offset, index = self.id.split(".")
        return int(offset), int(index)


def parse(sse_id: str, data: str) -> Received:
    """One SSE message, validated by the package: its model, and an exact round trip."""
    event = EVENTS.validate_json(data)
    assert isinstance(event, BaseEvent)
    assert ENCODER.encode(event) == f"data: {data}\n\n", "not what EventEncoder writes"
    assert sse_id and sse_id.count(".") == 1, sse_id
    return Received(sse_id, event, json.loads(data))


def read(
    http: httpx.Client,
    run_id: str,
    *,
    headers: dict[str, str] | None = None,
    limit: int | None = None,
    **params: Any,
) -> list[Received]:
    """The run's AG-UI stream (at most ``limit`` events, then the connection is dropped)."""
    got: list[Received] = []
    with connect_sse(
        http, "GET", f"/agui/runs/{run_id}/events", params=params, headers=dict(headers or {})
    ) as source:
        assert source.response.status_code == 200, source.response.read()
        assert source.response.headers["content-type"].startswith("text/event-stream")
        for sse in source.iter_sse():
            got.append(parse(sse.id, sse.data))
            if limit is not None and len(got) >= limit:
                break
    return got


def parse_stream(text: str) -> list[Received]:
    """The AG-UI events of a whole SSE body (``id:`` and ``data:`` lines)."""
    got = []
    for message in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in message.splitlines() if not line.startswith(":")
        )
        if fields:
            assert set(fields) == {"id", "data"}, fields
            got.append(parse(fields["id"], fields["data"]))
    return got


def check_lifecycle(events: Iterable[Received]) -> None:
    """The protocol's sequencing rules (as its TypeScript client verifies them).

    A run starts first and nothing but a new run follows its end; text messages and
    tool calls open before their content and close once; a step finishes only when
    started; a run ends with no message, tool call or step open; positions increase.
    """
    open_run = False
    messages: set[str] = set()
    calls: dict[str, str] = {}
    steps: set[str] = set()
    last: tuple[int, int] = (0, -1)
    for got in events:
        assert got.position > last, (got.id, last)
        last = got.position
        kind, event = got.event.type, got.event
        if kind == EventType.RUN_STARTED:
            assert not open_run, "RUN_STARTED while a run is open"
            open_run = True
            continue
        assert open_run, f"{kind} outside a run"
        if kind == EventType.TEXT_MESSAGE_START:
            assert event.message_id not in messages  # type: ignore[attr-defined]
            messages.add(event.message_id)  # type: ignore[attr-defined]
        elif kind in (EventType.TEXT_MESSAGE_CONTENT, EventType.TEXT_MESSAGE_END):
            assert event.message_id in messages, f"{kind} of a message not started"  # type: ignore[attr-defined]
            if kind == EventType.TEXT_MESSAGE_END:
                messages.discard(event.message_id)  # type: ignore[attr-defined]
            else:
                assert event.delta  # type: ignore[attr-defined]
        elif kind == EventType.TOOL_CALL_START:
            assert event.tool_call_id not in calls  # type: ignore[attr-defined]
            calls[event.tool_call_id] = ""  # type: ignore[attr-defined]
        elif kind == EventType.TOOL_CALL_ARGS:
            calls[event.tool_call_id] += event.delta  # type: ignore[attr-defined]
        elif kind == EventType.TOOL_CALL_END:
            json.loads(calls.pop(event.tool_call_id))  # type: ignore[attr-defined]
        elif kind == EventType.STEP_STARTED:
            assert event.step_name not in steps  # type: ignore[attr-defined]
            steps.add(event.step_name)  # type: ignore[attr-defined]
        elif kind == EventType.STEP_FINISHED:
            steps.remove(event.step_name)  # type: ignore[attr-defined]
        elif kind in (EventType.RUN_FINISHED, EventType.RUN_ERROR):
            assert not messages and not calls and not steps, (messages, calls, steps)
            open_run = False


def interrupts(events: list[Received]) -> list[dict[str, Any]]:
    """The interrupts of the last RUN_FINISHED (wire form, camelCase)."""
    finished = [e for e in events if e.type == "RUN_FINISHED"]
    assert finished, "no RUN_FINISHED"
    outcome = finished[-1].data["outcome"]
    assert outcome["type"] == "interrupt", outcome
    return list(outcome["interrupts"])


def resume_body(run_id: str, *entries: dict[str, Any]) -> dict[str, Any]:
    """A RunAgentInput answering interrupts of ``run_id``."""
    return {
        "threadId": run_id,
        "runId": f"{run_id}.resume",
        "messages": [],
        "resume": list(entries),
    }


def approve(interrupt: dict[str, Any], **payload: Any) -> dict[str, Any]:
    """A resume entry approving ``interrupt`` with its token (payload keys added)."""
    return {
        "interruptId": interrupt["id"],
        "status": "resolved",
        "payload": {"approved": True, **payload},
        "metadata": {"nbdurable": {"token": interrupt["metadata"]["nbdurable"]["token"]}},
    }


def deny(interrupt: dict[str, Any], **payload: Any) -> dict[str, Any]:
    """A resume entry denying ``interrupt`` (no token needed)."""
    return {
        "interruptId": interrupt["id"],
        "status": "resolved",
        "payload": {"approved": False, **payload},
    }


def types(events: Iterable[Received]) -> Iterator[str]:
    return (e.type for e in events)
