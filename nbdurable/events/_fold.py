"""Fold a run's events into what a viewer shows: the same picture from offset 0, any time."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..messages import ToolApprovalRequest, Usage
from ..runs import REASON_STATES, LateResult, late_result_line
from ._model import (
    APPROVAL_RESOLVED,
    MODEL_ATTEMPT_FAILED,
    MODEL_ATTEMPT_STARTED,
    MODEL_COMPLETED,
    MODEL_DELTA,
    RUN_ERROR,
    RUN_FINISHED,
    RUN_STARTED,
    RUN_STATE,
    RUN_SUSPENDED,
    RUN_TAKEN_OVER,
    STEP_FINISH,
    STEP_START,
    TOOL_APPROVAL_REQUEST,
    TOOL_CALL,
    TOOL_CALL_DELTA,
    TOOL_LATE_RESULT,
    TOOL_RESULT,
    Event,
)

__all__ = ["RunView", "StepView", "fold_events"]


@dataclass
class StepView:
    """One step as a viewer shows it.

    Attributes:
        step_index: The step.
        text: The completed model text (empty while the model is still answering).
        provisional_text: Streamed text of the current attempt, not yet completed.
        attempt_id: The current (latest) model attempt of the step.
        attempts: How many model attempts the step has had.
        forming_calls: Tool calls the current attempt is streaming, by call id:
            ``{"tool_call_id", "tool_name", "args_text"}`` with the JSON arguments
            written so far (gone once the attempt completes: the complete calls
            are in ``tool_calls`` then).
        tool_calls: ``{"tool_call_id", "tool_name", "args"}`` dicts, one per call id.
        tool_results: ``{"tool_call_id", "tool_name", "result", "is_error"}`` dicts,
            one per call id.
        finish_reason: The model's finish reason, once the step finished.
        usage: The step's usage, once the step finished.
    """

    step_index: int
    text: str = ""
    provisional_text: str = ""
    attempt_id: str | None = None
    attempts: int = 0
    forming_calls: dict[str, dict[str, str]] = field(default_factory=dict)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclass
class RunView:
    """The visible state of a run, built by applying its events in offset order.

    Attributes:
        run_id: The run.
        status: ``running``, ``suspended``, ``completed``, ``error`` or ``unknown``
            (no events yet); for a runtime run, its run state (``queued``,
            ``retry_wait``, ``waiting_approval``, ``failed``, ...).
        steps: Steps by index.
        pending_approvals: Requests still waiting for a verdict (resolved ones are gone).
        finish_reason: Why the run last ended or stopped.
        usage: The whole run's cumulative usage, as of the last finish.
        error: ``"<type>: <message>"`` of the last error, while in ``error``.
        last_offset: Offset of the last applied event (resume a subscription after it).
        takeover: One line when the current leg's owner took the run over from
            another (``run_taken_over``); empty otherwise.
        late_results: One line per ``tool_late_result``: a call an owner that
            had lost the run finished (or was still running) anyway. Kept for
            the whole run: the call may have run twice.
    """

    run_id: str | None = None
    status: str = "unknown"
    steps: dict[int, StepView] = field(default_factory=dict)
    pending_approvals: dict[str, ToolApprovalRequest] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    last_offset: int = 0
    takeover: str = ""
    late_results: list[str] = field(default_factory=list)
    # Set by the first run_state: a runtime run's status comes from its states, and
    # its run_suspended is only the leg's end (the state that follows names why).
    managed: bool = field(default=False, repr=False)

    @property
    def text(self) -> str:
        """The final text: the completed text of the last step that has one."""
        for index in sorted(self.steps, reverse=True):
            if self.steps[index].text:
                return self.steps[index].text
        return ""

    def step(self, index: int) -> StepView:
        """The view of step ``index``, created on first use."""
        if index not in self.steps:
            self.steps[index] = StepView(step_index=index)
        return self.steps[index]

    def apply(self, event: Event) -> RunView:
        """Apply one event (events at or below ``last_offset`` are skipped); return self."""
        if event.offset <= self.last_offset:
            return self  # a replayed event after a reconnect: already applied
        self.last_offset = event.offset
        self.run_id = event.run_id
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event)
        elif event.type in _STEP_HANDLERS and event.step_index is not None:
            _STEP_HANDLERS[event.type](self.step(event.step_index), event)
        return self


def _run_started(view: RunView, event: Event) -> None:
    view.status = "running"
    view.error = None
    # A new leg settles every request that was pending (a verdict or the default
    # denial); whatever still waits is requested again if the leg suspends.
    view.pending_approvals.clear()


def _step_start(view: RunView, event: Event) -> None:
    view.status = "running"
    if event.step_index is not None:
        view.step(event.step_index)


def _attempt_started(step: StepView, event: Event) -> None:
    step.attempt_id = event.attempt_id
    step.provisional_text = ""  # a new attempt replaces the previous partial output
    step.forming_calls = {}
    step.attempts += 1


def _delta(step: StepView, event: Event) -> None:
    if event.attempt_id == step.attempt_id and event.payload.get("type") == "text_delta":
        step.provisional_text += str(event.payload.get("delta", ""))


def _call_delta(step: StepView, event: Event) -> None:
    if event.attempt_id != step.attempt_id:
        return  # an earlier attempt's, replaced
    payload = event.payload
    call_id = str(payload.get("tool_call_id", ""))
    call = step.forming_calls.setdefault(
        call_id, {"tool_call_id": call_id, "tool_name": "", "args_text": ""}
    )
    call["tool_name"] = str(payload.get("tool_name") or call["tool_name"])
    call["args_text"] += str(payload.get("args_delta", ""))


def _attempt_failed(step: StepView, event: Event) -> None:
    if event.attempt_id == step.attempt_id:
        step.provisional_text = ""
        step.forming_calls = {}


def _completed(step: StepView, event: Event) -> None:
    response = event.payload.get("response", {})
    step.text = "".join(
        part.get("text", "") for part in response.get("content", ()) if part.get("type") == "text"
    )
    step.provisional_text = ""
    step.forming_calls = {}  # complete now: the tool_call events follow
    step.attempt_id = event.attempt_id


def _replace_or_add(items: list[dict[str, Any]], item: dict[str, Any]) -> None:
    """Add ``item``, or replace the entry with its ``tool_call_id``.

    A leg that resumes a run after a crash announces the interrupted step's
    calls again: the same call, so it is listed once.
    """
    call_id = item.get("tool_call_id")
    for i, known in enumerate(items):
        if call_id is not None and known.get("tool_call_id") == call_id:
            items[i] = item
            return
    items.append(item)


def _tool_call(step: StepView, event: Event) -> None:
    _replace_or_add(step.tool_calls, event.payload.get("tool_call", {}))


def _approval_request(view: RunView, event: Event) -> None:
    request = ToolApprovalRequest.model_validate(event.payload["request"])
    view.pending_approvals[request.approval_id] = request


def _approval_resolved(view: RunView, event: Event) -> None:
    view.pending_approvals.pop(str(event.payload.get("approval_id")), None)


def _tool_result(step: StepView, event: Event) -> None:
    _replace_or_add(step.tool_results, event.payload.get("result", {}))


def _step_finish(step: StepView, event: Event) -> None:
    step.finish_reason = event.payload.get("finish_reason")
    step.usage = Usage.model_validate(event.payload.get("usage", {}))


def _ended(view: RunView, event: Event) -> None:
    if event.type == RUN_SUSPENDED and view.managed:
        # The run_state after this names the state; until it lands, a leg that
        # stopped on approvals is already waiting for them (never a bare "suspended").
        if view.pending_approvals:
            view.status = "waiting_approval"
    else:
        view.status = "suspended" if event.type == RUN_SUSPENDED else "completed"
    if "finish_reason" in event.payload:  # a task run's run_finished has no leg's finish
        view.finish_reason = event.payload.get("finish_reason")
        view.usage = Usage.model_validate(event.payload.get("total_usage", {}))
    if event.type == RUN_FINISHED:
        view.pending_approvals.clear()


def _error(view: RunView, event: Event) -> None:
    payload = event.payload
    # A runtime run's terminal run_error names its final state (failed, cancelled).
    view.status = str(payload.get("state") or "error")
    reason = payload.get("reason") if "state" in payload else None
    view.error = str(reason) if reason else f"{payload.get('error_type')}: {payload.get('message')}"
    for step in view.steps.values():
        step.provisional_text = ""  # an interrupted attempt's output is void


def _state(view: RunView, event: Event) -> None:
    # A runtime run's state is the authority: retry_wait, needs_attention, ...
    view.status = str(event.payload.get("state", view.status))
    view.managed = True
    if view.status == "running":
        view.takeover = ""  # a new claim: a takeover event follows when it is one
    if view.status == "completed":
        view.pending_approvals.clear()
    if event.payload.get("reason") and view.status in REASON_STATES:
        view.error = str(event.payload["reason"])


def _taken_over(view: RunView, event: Event) -> None:
    view.takeover = str(event.payload.get("message", "Taken over by another runtime."))


def _late_result(view: RunView, event: Event) -> None:
    try:
        line = late_result_line(LateResult.model_validate(event.payload))
    except ValueError:  # a payload of another release: still said, less precisely
        line = f"a call ran late, after its owner had lost the run: {event.payload}"
    view.late_results.append(line)


_HANDLERS: dict[str, Callable[[RunView, Event], None]] = {
    RUN_STARTED: _run_started,
    STEP_START: _step_start,
    TOOL_APPROVAL_REQUEST: _approval_request,
    APPROVAL_RESOLVED: _approval_resolved,
    RUN_SUSPENDED: _ended,
    RUN_FINISHED: _ended,
    RUN_ERROR: _error,
    RUN_STATE: _state,
    RUN_TAKEN_OVER: _taken_over,
    TOOL_LATE_RESULT: _late_result,
}

_STEP_HANDLERS: dict[str, Callable[[StepView, Event], None]] = {
    MODEL_ATTEMPT_STARTED: _attempt_started,
    MODEL_DELTA: _delta,
    TOOL_CALL_DELTA: _call_delta,
    MODEL_ATTEMPT_FAILED: _attempt_failed,
    MODEL_COMPLETED: _completed,
    TOOL_CALL: _tool_call,
    TOOL_RESULT: _tool_result,
    STEP_FINISH: _step_finish,
}
"""The events of one step: applied to its view, and only when they name their step."""


def fold_events(events: Iterable[Event], view: RunView | None = None) -> RunView:
    """Apply ``events`` in order to ``view`` (a new one by default) and return it."""
    view = view if view is not None else RunView()
    for event in events:
        view.apply(event)
    return view
