"""The events the writer builds without validation equal the validated ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import nbdurable as nd
from nbdurable import events as ev
from nbdurable._deps import Deps
from nbdurable.durable._checkpoint import AgentCheckpoint
from nbdurable.events._writer import EventWriter
from nbdurable.messages import ToolApprovalRequest, ToolCallPart, ToolResultPart, VerdictSource
from nbdurable.models._base import ModelResponse
from nbdurable.parts import (
    ApprovalRequestStreamPart,
    ApprovalResolvedStreamPart,
    FinishPart,
    StepFinishPart,
    StepStartPart,
    TextDeltaPart,
    ToolCallStreamPart,
    ToolResultStreamPart,
)


class RecordingStore(nd.InMemorySessionStore):
    """A real in-memory store that also keeps the event objects it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[ev.NewEvent] = []

    def append_events(
        self, run_id: str, events: Sequence[ev.NewEvent], *, fence: int | None = None
    ) -> list[ev.Event]:
        self.handed.extend(events)
        return super().append_events(run_id, events, fence=fence)

    def save_with_events(
        self, checkpoint: AgentCheckpoint, events: Sequence[ev.NewEvent], **options: Any
    ) -> list[ev.Event]:
        self.handed.extend(events)
        return super().save_with_events(checkpoint, events, **options)


def validated(event: ev.NewEvent) -> ev.NewEvent:
    """The same event through pydantic's validation, with the fields the writer set."""
    return ev.NewEvent(**{name: getattr(event, name) for name in event.model_fields_set})


async def test_every_event_the_writer_builds_equals_its_validated_form() -> None:
    store = RecordingStore()
    writer = EventWriter(store, "r1", deps=Deps(), flush_interval=0)
    usage = nd.Usage(input_tokens=3, output_tokens=2, total_tokens=5, cost=0.25)
    call = ToolCallPart(tool_call_id="c1", tool_name="look", args={"k": "v\udcff", "n": 1.5})
    request = ToolApprovalRequest(
        approval_id="a1", tool_call_id="c1", tool_name="look", input={"k": "é"}
    )
    source = VerdictSource(by="ann", authenticated=False, via="widget")
    writer.started(resumed=False, next_step_index=0)
    writer.started(resumed=True, next_step_index=2, retried=True)
    writer.part(StepStartPart(step_index=0))
    writer.attempt_started(0, "r1:model:0", "a" * 32)
    writer.delta(TextDeltaPart(step_index=0, delta="hé\ud800llo"), "r1:model:0", "a" * 32)
    writer.attempt_failed(0, "r1:model:0", "a" * 32, ValueError("bad \udcff byte"))
    writer.attempt_completed(
        0,
        "r1:model:0",
        "b" * 32,
        ModelResponse(content=(call,), usage=usage, finish_reason="tool_calls", model_id="m"),
    )
    writer.part(ToolCallStreamPart(step_index=0, tool_call=call))
    writer.part(ApprovalRequestStreamPart(step_index=0, request=request))
    writer.part(
        ApprovalResolvedStreamPart(step_index=0, approval_id="a1", tool_call_id="c1", approved=True)
    )
    writer.part(
        ApprovalResolvedStreamPart(
            step_index=0,
            approval_id="a1",
            tool_call_id="c1",
            approved=False,
            reason="no",
            source=source,
        )
    )
    result = ToolResultPart(tool_call_id="c1", tool_name="look", result={"rows": [1, None]})
    writer.part(ToolResultStreamPart(step_index=0, result=result))
    writer.part(StepFinishPart(step_index=0, usage=usage, finish_reason="tool_calls"))
    await writer.save_checkpoint(
        AgentCheckpoint(run_id="r1", step_index=0, status="running", messages=(), created_at=1)
    )
    for status in ("completed", "suspended"):
        writer.part(FinishPart(finish_reason="stop", status=status, usage=usage, total_usage=usage))
    writer.error(RuntimeError("it broke \udcff"))
    await writer.close()

    handed = store.handed
    assert [event.type for event in handed] == [
        ev.RUN_STARTED,
        ev.RUN_STARTED,
        ev.STEP_START,
        ev.MODEL_ATTEMPT_STARTED,
        ev.MODEL_DELTA,
        ev.MODEL_ATTEMPT_FAILED,
        ev.MODEL_COMPLETED,
        ev.TOOL_CALL,
        ev.TOOL_APPROVAL_REQUEST,
        ev.APPROVAL_RESOLVED,
        ev.APPROVAL_RESOLVED,
        ev.TOOL_RESULT,
        ev.STEP_FINISH,
        ev.CHECKPOINT_SAVED,
        ev.RUN_FINISHED,
        ev.RUN_SUSPENDED,
        ev.RUN_ERROR,
    ]
    for event in handed:
        again = validated(event)
        assert type(event) is ev.NewEvent
        assert event == again, event.type
        assert event.model_fields_set == again.model_fields_set, event.type
        assert event.model_dump() == again.model_dump(), event.type
        assert event.model_dump_json() == again.model_dump_json(), event.type
        assert repr(event) == repr(again), event.type
        # No string the writer stores holds a lone surrogate (every store can encode it).
        event.model_dump_json().encode()
    # What a log returns is what was handed to it.
    assert [e.model_dump(exclude={"run_id", "offset"}) for e in store.read_events("r1")] == [
        e.model_dump() for e in handed
    ]


class RecordingSqliteStore(nd.SqliteSessionStore):
    """A real SQLite store that also keeps the event objects it was handed."""

    handed: list[ev.NewEvent]

    def append_events(
        self, run_id: str, events: Sequence[ev.NewEvent], *, fence: int | None = None
    ) -> Sequence[ev.Event]:
        self.handed.extend(events)
        return super().append_events(run_id, events, fence=fence)


async def test_a_sqlite_log_reads_back_what_the_writer_built(tmp_path: Any) -> None:
    store = RecordingSqliteStore(tmp_path / "events.db")
    store.handed = []
    try:
        writer = EventWriter(store, "r1", deps=Deps(), flush_interval=0)
        usage = nd.Usage(input_tokens=3, output_tokens=2, total_tokens=5, cost=0.125)
        call = ToolCallPart(tool_call_id="c1", tool_name="look", args={"k": "v", "n": 1e16})
        writer.started(resumed=False, next_step_index=0)
        writer.part(StepStartPart(step_index=0))
        writer.attempt_started(0, "r1:model:0", "a" * 32)
        writer.delta(TextDeltaPart(step_index=0, delta="x\ud800"), "r1:model:0", "a" * 32)
        writer.attempt_completed(
            0, "r1:model:0", "a" * 32, ModelResponse(content=(call,), usage=usage)
        )
        writer.part(ToolCallStreamPart(step_index=0, tool_call=call))
        writer.part(StepFinishPart(step_index=0, usage=usage, finish_reason="tool_calls"))
        writer.error(ValueError("x"))
        await writer.close()
        read = store.read_events("r1")
        assert len(store.handed) == len(read) == 8
        for handed, back in zip(store.handed, read, strict=True):
            assert back.model_dump(exclude={"run_id", "offset"}) == validated(handed).model_dump()
        assert read[4].payload["response"]["content"][0]["args"] == {"k": "v", "n": 1e16}
        assert read[3].payload["delta"] == "x\ufffd"
    finally:
        store.close()
