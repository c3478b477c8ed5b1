"""The persisted event log: every run's events with per-run offsets, replay and live tail."""

from .fold import RunView, StepView, fold_events
from .log import EVENTS, EventStore
from .model import (
    APPROVAL_RESOLVED,
    CHECKPOINT_SAVED,
    MODEL_ATTEMPT_FAILED,
    MODEL_ATTEMPT_STARTED,
    MODEL_COMPLETED,
    MODEL_DELTA,
    RUN_ERROR,
    RUN_FINISHED,
    RUN_STARTED,
    RUN_SUSPENDED,
    RUN_TAKEN_OVER,
    STEP_FINISH,
    STEP_START,
    TERMINAL_EVENTS,
    TOOL_APPROVAL_REQUEST,
    TOOL_CALL,
    TOOL_RESULT,
    Event,
    NewEvent,
    position,
)
from .subscribe import read_events, subscribe
from .writer import EventWriter

__all__ = [
    "APPROVAL_RESOLVED",
    "CHECKPOINT_SAVED",
    "EVENTS",
    "MODEL_ATTEMPT_FAILED",
    "MODEL_ATTEMPT_STARTED",
    "MODEL_COMPLETED",
    "MODEL_DELTA",
    "RUN_ERROR",
    "RUN_FINISHED",
    "RUN_STARTED",
    "RUN_SUSPENDED",
    "RUN_TAKEN_OVER",
    "STEP_FINISH",
    "STEP_START",
    "TERMINAL_EVENTS",
    "TOOL_APPROVAL_REQUEST",
    "TOOL_CALL",
    "TOOL_RESULT",
    "Event",
    "EventStore",
    "EventWriter",
    "NewEvent",
    "RunView",
    "StepView",
    "fold_events",
    "position",
    "read_events",
    "subscribe",
]
