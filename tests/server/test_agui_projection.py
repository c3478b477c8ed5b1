"""The projection of a log onto AG-UI events, for logs a live test rarely writes: a
model that does not stream, a failed attempt, a takeover, needs_attention, a stop
without approvals, ids JSON Pointer must escape; every event checked by the package."""

from __future__ import annotations

from typing import Any

import nbdurable as nd
from nbdurable.server._agui import Projector, agui_frame

from .agui_client import check_lifecycle, parse_stream

RUN = "run-p"


def _log(*entries: tuple[Any, ...]) -> list[nd.Event]:
    """Events from ``(type, payload, step_index, attempt_id)`` tuples, offsets from 1."""
    events = []
    for offset, entry in enumerate(entries, start=1):
        type_, payload, step, attempt = (*entry, None, None, None)[:4]
        events.append(
            nd.Event(
                run_id=RUN,
                offset=offset,
                type=type_,
                payload=payload or {},
                step_index=step,
                attempt_id=attempt,
                created_at=1_700_000_000_000 + offset,
            )
        )
    return events


def _project(events: list[nd.Event], projector: Projector | None = None) -> list[Any]:
    projector = projector or Projector(RUN)
    text = b"".join(
        agui_frame(f"{event.offset}.{k}", agui)
        for event in events
        for k, agui in enumerate(projector.project(event))
    ).decode()
    got = parse_stream(text)  # every event validated by ag-ui-protocol, exact round trip
    check_lifecycle(got)
    return got


def _response(text: str, *calls: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_call", **call} for call in calls]
    return {"response": {"content": content, "finish_reason": "stop"}}


def test_an_unstreamed_answer_comes_whole_and_a_failed_attempts_text_is_closed() -> None:
    got = _project(
        _log(
            ("run_started", {}),
            ("step_start", {}, 0),
            ("model_attempt_started", {}, 0, "a1"),
            ("model_delta", {"type": "text_delta", "delta": "Hal"}, 0, "a1"),
            ("model_attempt_failed", {"message": "down"}, 0, "a1"),
            ("model_attempt_started", {}, 0, "a2"),
            ("model_completed", _response("Hello."), 0, "a2"),
            ("step_finish", {}, 0),
            ("run_finished", {"state": "completed"}),
        )
    )
    kinds = [(e.type, e.data.get("messageId")) for e in got if "MESSAGE" in e.type]
    assert kinds == [
        ("TEXT_MESSAGE_START", "a1"),
        ("TEXT_MESSAGE_CONTENT", "a1"),
        ("TEXT_MESSAGE_END", "a1"),  # the failed attempt's partial text ends there
        ("TEXT_MESSAGE_START", "a2"),
        ("TEXT_MESSAGE_CONTENT", "a2"),
        ("TEXT_MESSAGE_END", "a2"),
    ]
    assert got[-1].data["result"] == "Hello."
    assert [e.data["timestamp"] for e in got][:1] == [1_700_000_000_001]


def test_a_takeover_continues_the_agui_run_and_a_stop_without_approvals_is_an_interrupt() -> None:
    got = _project(
        _log(
            ("run_state", {"state": "running"}),
            ("run_started", {}),
            ("step_start", {}, 0),
            ("run_taken_over", {"message": "the owner died"}),
            ("run_started", {"resumed": True}),
            ("step_start", {}, 0),
            (
                "model_completed",
                _response("", {"tool_call_id": "c1", "tool_name": "t", "args": {}}),
                0,
                "a1",
            ),
            ("tool_call", {"tool_call": {"tool_call_id": "c1", "tool_name": "t", "args": {}}}, 0),
            ("run_suspended", {"finish_reason": "suspended"}),
        )
    )
    assert [e.type for e in got].count("RUN_STARTED") == 1
    assert [e.type for e in got].count("STEP_STARTED") == 1
    start = next(e for e in got if e.type == "TOOL_CALL_START")
    assert "parentMessageId" not in start.data  # no text in that step
    [interrupt] = got[-1].data["outcome"]["interrupts"]
    assert interrupt["reason"] == "nbdurable:suspended"


def test_needs_attention_ends_the_run_with_an_interrupt_and_ids_are_escaped() -> None:
    request = {
        "approval_id": "a/b~c",
        "tool_call_id": "c1",
        "tool_name": "drop",
        "input": {"name": "x"},
        "token": None,
    }
    got = _project(
        _log(
            ("run_state", {"state": "running"}),
            ("run_started", {}),
            ("tool_approval_request", {"request": request}, 0),
            ("approval_resolved", {"approval_id": "a/b~c", "approved": False}, 0),
            ("run_state", {"state": "needs_attention", "reason": "a call may have run"}),
        )
    )
    paths = [e.data["delta"][0]["path"] for e in got if e.type == "STATE_DELTA"]
    assert paths == ["/approvals/a~1b~0c", "/approvals/a~1b~0c/status", "/status"]
    [interrupt] = got[-1].data["outcome"]["interrupts"]
    assert interrupt["reason"] == "nbdurable:needs_attention"
    assert interrupt["message"] == "a call may have run"
    assert got[-2].data["snapshot"]["approvals"]["a/b~c"]["status"] == "denied"


def test_the_interrupt_shows_the_token_the_bridge_signs_and_when_it_expires() -> None:
    request = nd.ToolApprovalRequest(
        approval_id="ap1", tool_call_id="c1", tool_name="drop", input={"n": 1}, token="v1.old.mac"
    )
    fresh = request.model_copy(update={"token": "v1.eyJpc3N1ZWRfYXQiOjB9.mac"})  # issued_at 0
    projector = Projector(RUN, sign=lambda r: fresh, max_age_ms=86_400_000)
    got = _project(
        _log(
            ("run_started", {}),
            ("tool_approval_request", {"request": request.model_dump(mode="json")}, 0),
            ("run_suspended", {}),
        ),
        projector,
    )
    [interrupt] = got[-1].data["outcome"]["interrupts"]
    assert interrupt["metadata"]["nbdurable"]["token"] == fresh.token
    assert interrupt["expiresAt"] == "1970-01-02T00:00:00.000Z"
    assert interrupt["toolCallId"] == "c1" and interrupt["message"] == 'Run drop({"n": 1})?'
    assert "editedArgs" not in interrupt["responseSchema"]["properties"]  # the tool allows none
