"""Events: what a run emits, persisted per run with gap-free offsets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, overload

from pydantic import Field, TypeAdapter

from ..messages import FrozenModel, JsonObject
from ..parts import FinishPart, StreamPart, TextDeltaPart, ToolCallDeltaPart
from ..runs import TERMINAL_STATES

__all__ = [
    "APPROVAL_RESOLVED",
    "CHECKPOINT_SAVED",
    "GRANT_ADDED",
    "GRANT_REVOKED",
    "MODEL_ATTEMPT_FAILED",
    "MODEL_ATTEMPT_STARTED",
    "MODEL_COMPLETED",
    "MODEL_DELTA",
    "PART_EVENTS",
    "RUN_ERROR",
    "RUN_FINISHED",
    "RUN_FORKED",
    "RUN_STARTED",
    "RUN_STATE",
    "RUN_SUSPENDED",
    "RUN_TAKEN_OVER",
    "STEP_FINISH",
    "STEP_START",
    "TERMINAL_EVENTS",
    "TOOL_APPROVAL_REQUEST",
    "TOOL_CALL",
    "TOOL_CALL_DELTA",
    "TOOL_LATE_RESULT",
    "TOOL_RESULT",
    "Event",
    "NewEvent",
    "NumberedEvents",
    "delta_event",
    "numbered",
    "position",
]


RUN_STARTED: Final = "run_started"
"""A leg of the run started (payload: ``resumed``, ``next_step_index``; ``retried: true``
on the first leg after ``retry()`` of a failed or needs_attention runtime run)."""
STEP_START: Final = "step_start"
MODEL_ATTEMPT_STARTED: Final = "model_attempt_started"
"""A model call began; a new attempt for the same operation replaces earlier partial output."""
MODEL_DELTA: Final = "model_delta"
"""A piece of streamed output: payload ``{"type": "text_delta", "turn": step, "delta": ...}``."""
TOOL_CALL_DELTA: Final = "tool_call_delta"
"""A fragment of a tool call's JSON arguments as the model streams them, an event of its
attempt like ``model_delta``: payload ``{"turn": step, "tool_call_id", "tool_name",
"args_delta"}``. The complete call follows in ``model_completed`` and ``tool_call``."""
MODEL_ATTEMPT_FAILED: Final = "model_attempt_failed"
"""The attempt failed (``failure_kind``: ``model`` or ``local``); discard its partial output."""
MODEL_COMPLETED: Final = "model_completed"
"""The attempt's validated response (payload ``response``): the only model checkpoint."""
TOOL_CALL: Final = "tool_call"
TOOL_APPROVAL_REQUEST: Final = "tool_approval_request"
APPROVAL_RESOLVED: Final = "approval_resolved"
"""A pending approval got its verdict: it is no longer pending."""
TOOL_RESULT: Final = "tool_result"
STEP_FINISH: Final = "step_finish"
CHECKPOINT_SAVED: Final = "checkpoint_saved"
"""Written in the same transaction as the checkpoint it names."""
RUN_SUSPENDED: Final = "run_suspended"
RUN_FINISHED: Final = "run_finished"
RUN_ERROR: Final = "run_error"
RUN_STATE: Final = "run_state"
"""A runtime run changed state (payload: ``state``, ``reason``, ``next_attempt_at``)."""
RUN_FORKED: Final = "run_forked"
"""First event of a fork's log (payload: the parent's ``run_id`` and ``step_index``, ``edited``)."""
RUN_TAKEN_OVER: Final = "run_taken_over"
"""A runtime took the run over from an owner whose lease lapsed or whose process was gone
(payload: ``previous_owner``, ``owner``, ``cause``, ``step_index``, ``tool_calls``, ``message``)."""

TOOL_LATE_RESULT: Final = "tool_late_result"
"""An owner that had lost the run finished a tool call anyway, or was still running it
(payload: a :class:`~nbdurable.runs.LateResult`: ``tool_call_id``,
``tool_name``, ``step_index``, ``fence``, ``owner``, ``at``, ``outcome``, ``result``).
Appended without a fence by the fenced-out owner; it changes nothing else (see
:mod:`nbdurable.runs`). Stored as its text in SQLite's packed
batches (no type code: a code would change the format)."""

GRANT_ADDED: Final = "grant_added"
"""A standing approval was granted (payload: ``grant_id``, ``tool``, ``expires_at``,
``match``, ``agent_path``, ``granted_by``, ``via``; never the signed token)."""
GRANT_REVOKED: Final = "grant_revoked"
"""A standing approval was revoked (payload: ``grant_id``, ``revoked_by``, ``via``)."""

TERMINAL_EVENTS: Final = frozenset({RUN_FINISHED, RUN_ERROR})
"""The last event a run writes while it is final (``run_finished`` or ``run_error``).

A runtime run writes ``run_finished`` when it completes and ``run_error`` when it
fails or is cancelled (payload ``state``), each right after its final ``run_state``
and in the same append; a model attempt that will be retried writes
``model_attempt_failed`` and a ``retry_wait`` state, never ``run_error``. Nothing
follows until the run is retried or resumed: the new leg's ``run_started`` comes
after the old terminal event."""

# Stream part type -> event type, for parts that map one to one.
PART_EVENTS: Final[dict[str, str]] = {
    "step-start": STEP_START,
    "tool-call": TOOL_CALL,
    "tool-approval-request": TOOL_APPROVAL_REQUEST,
    "tool-approval-resolved": APPROVAL_RESOLVED,
    "tool-result": TOOL_RESULT,
    "step-finish": STEP_FINISH,
}
_EVENT_PARTS = {event: part for part, event in PART_EVENTS.items()}
_PARTS: TypeAdapter[StreamPart] = TypeAdapter(StreamPart)
_FINISH_FIELDS = frozenset(FinishPart.model_fields) - {"type"}
"""What a ``run_finished`` payload shares with the finish part (a runtime run adds ``state``)."""


class NewEvent(FrozenModel):
    """An event before the log has given it an offset.

    Its payload's strings follow the lone-surrogate policy of
    :mod:`nbdurable.messages` (U+FFFD), so every store can encode it.
    """

    type: str
    step_index: int | None = None
    operation_id: str | None = None
    attempt_id: str | None = None
    payload: JsonObject = Field(default_factory=dict)
    created_at: int


class Event(NewEvent):
    """An event in a run's log.

    Attributes:
        run_id: The run it belongs to.
        offset: Position in the run's log: starts at 1, no holes, continues
            across resume legs. ``read_events(run_id, after=n)`` returns offsets > n.
        type: One of the event type constants of :mod:`nbdurable.events`.
        step_index: The step it belongs to, where one applies.
        operation_id: The model operation (one per step), for model events.
        attempt_id: The model attempt, unique per call of the model.
        payload: Type-specific JSON data.
        created_at: Epoch milliseconds from the writer's clock.
    """

    run_id: str
    offset: int
    # What a log returns was valid when it was written: no second walk on reads.
    payload: dict[str, Any] = Field(default_factory=dict)

    @property
    def ends_stream(self) -> bool:
        """Whether nothing follows this event until someone resumes or retries the run."""
        if self.type == RUN_STATE:
            return self.payload.get("state") in TERMINAL_STATES
        return self.type in TERMINAL_EVENTS

    def position(self) -> tuple[int, bool]:
        """``(offset, True)``: every logged event is a valid resume point."""
        return self.offset, True

    def to_part(self) -> StreamPart | None:
        """The stream part this event carries, when it carries one."""
        part_type = _EVENT_PARTS.get(self.type)
        if part_type is not None:
            return _PARTS.validate_python({**self.payload, "type": part_type})
        if self.type == MODEL_DELTA and self.payload.get("type") == "text_delta":
            return _PARTS.validate_python(
                {
                    "type": "text-delta",
                    "step_index": self.step_index or 0,
                    "delta": self.payload.get("delta", ""),
                }
            )
        if self.type == TOOL_CALL_DELTA:
            return _PARTS.validate_python(
                {
                    "type": "tool-call-delta",
                    "step_index": self.step_index or 0,
                    "tool_call_id": self.payload.get("tool_call_id", ""),
                    "tool_name": self.payload.get("tool_name", ""),
                    "args_delta": self.payload.get("args_delta", ""),
                }
            )
        if self.type in (RUN_FINISHED, RUN_SUSPENDED) and "finish_reason" in self.payload:
            fields = {k: v for k, v in self.payload.items() if k in _FINISH_FIELDS}
            return _PARTS.validate_python({**fields, "type": "finish"})
        if self.type == RUN_ERROR:
            return _PARTS.validate_python(
                {
                    "type": "error",
                    "error_type": self.payload.get("error_type", "Error"),
                    "message": self.payload.get("message", ""),
                }
            )
        return None


def delta_event(part: TextDeltaPart | ToolCallDeltaPart) -> tuple[str, dict[str, Any]]:
    """The type and payload of the event of a streamed text or tool-argument delta."""
    if isinstance(part, TextDeltaPart):
        return MODEL_DELTA, {"type": "text_delta", "turn": part.step_index, "delta": part.delta}
    return TOOL_CALL_DELTA, {
        "turn": part.step_index,
        "tool_call_id": part.tool_call_id,
        "tool_name": part.tool_name,
        "args_delta": part.args_delta,
    }


def position(item: object) -> tuple[int, bool]:
    """``(offset, True)`` for a logged :class:`Event`; ``(0, False)`` for anything else.

    Stream parts seen in-process (``full_stream``) are not log entries: never
    use them as a resume point.
    """
    if isinstance(item, Event):
        return item.offset, True
    return 0, False


class NumberedEvents(Sequence[Event]):
    """``events`` as log entries with offsets ``last + 1, last + 2, ...``, built on access.

    Stores return this from their appends: the writer in the loop never looks at
    the result, so building an :class:`Event` for every streamed delta would be waste.
    A slice is a list of them, built at once.
    """

    def __init__(self, run_id: str, events: Sequence[NewEvent], last: int) -> None:
        self.run_id = run_id
        self.events = events
        self.last = last

    def __len__(self) -> int:
        return len(self.events)

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...
    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self.events)
        event = self.events[index]
        # Built without validating again: the events were validated when they were made.
        return Event.model_construct(
            run_id=self.run_id,
            offset=self.last + index + 1,
            type=event.type,
            step_index=event.step_index,
            operation_id=event.operation_id,
            attempt_id=event.attempt_id,
            payload=event.payload,
            created_at=event.created_at,
        )

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return f"NumberedEvents({list(self)!r})"


def numbered(run_id: str, events: Sequence[NewEvent], last: int) -> NumberedEvents:
    """``events`` as log entries numbered after offset ``last`` (built lazily)."""
    return NumberedEvents(run_id, events, last)
