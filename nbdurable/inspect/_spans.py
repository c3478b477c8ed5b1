"""A run's spans, folded from its event log: where the run's time went, without pandas.

A span is an interval between two logged events: a leg (``run_started`` to the
event that ends it), a model call (``model_attempt_started`` to
``model_completed`` or ``model_attempt_failed``), a tool call (``tool_call`` to
``tool_result``; a gated call from its ``approval_resolved``), and the waits
between legs: for an approval, for a model retry, for someone to retry a run
that needs attention, in the queue, and the gap a takeover closes. Times are
the writers' ``created_at`` (epoch ms); :mod:`._frame` turns them into datetimes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events._model import (
    APPROVAL_RESOLVED,
    MODEL_ATTEMPT_FAILED,
    MODEL_ATTEMPT_STARTED,
    MODEL_COMPLETED,
    RUN_ERROR,
    RUN_FINISHED,
    RUN_STARTED,
    RUN_STATE,
    RUN_SUSPENDED,
    TOOL_APPROVAL_REQUEST,
    TOOL_CALL,
    TOOL_RESULT,
    Event,
)
from ..runs import QUEUED_STATES, SETTLED_OK_STATES, STOP_STATES
from ._source import StoreLike, opened, run_events

if TYPE_CHECKING:
    from ._frame import InspectFrame

__all__ = ["SPAN_COLUMNS", "SPAN_KINDS", "span_rows", "spans"]

SPAN_KINDS: tuple[str, ...] = (
    "leg",
    "model_call",
    "tool_call",
    "approval_wait",
    "retry_wait",
    "attention_wait",
    "queue_wait",
    "takeover_gap",
)
"""Every span kind, in the order the timeline's legend lists them."""

SPAN_COLUMNS: tuple[str, ...] = (
    "span",
    "kind",
    "name",
    "step_index",
    "start",
    "end",
    "duration_ms",
    "attempt",
    "status",
    "tool_call_id",
    "detail",
)

RUN_TAKEN_OVER = "run_taken_over"
"""Written by a runtime that took a run over, before the new leg's ``run_started``."""

# run_state values that end the leg in flight, and the wait span each opens.
_WAITS = {
    "retry_wait": "retry_wait",
    "needs_attention": "attention_wait",
    "failed": "attention_wait",
    "queued": "queue_wait",
    "pending": "queue_wait",
}
_WAIT_KINDS = frozenset({*_WAITS.values(), "takeover_gap"})
_LEG_ENDS = STOP_STATES | {"retry_wait"}


@dataclass
class _Span:
    kind: str
    start: int
    offset: int
    name: str | None = None
    step_index: int | None = None
    end: int | None = None
    attempt: int | None = None
    status: str = "open"
    tool_call_id: str | None = None
    detail: str | None = None
    final: bool = False  # a wait that only counts if the run moved on (a failed run)

    def close(self, at: int, status: str, detail: str | None = None) -> None:
        self.end, self.status = max(at, self.start), status
        if detail is not None:
            self.detail = detail

    def row(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "step_index": self.step_index,
            "start": self.start,
            "end": self.end,
            "duration_ms": None if self.end is None else self.end - self.start,
            "attempt": self.attempt,
            "status": self.status,
            "tool_call_id": self.tool_call_id,
            "detail": self.detail,
        }


@dataclass
class _Fold:
    agent: str | None
    spans: list[_Span] = field(default_factory=list)
    leg: _Span | None = None
    wait: _Span | None = None  # the open retry/attention/queue wait, if any
    gap: _Span | None = None  # a takeover gap waiting for its leg
    models: dict[str, _Span] = field(default_factory=dict)  # by attempt id
    tools: dict[str, _Span] = field(default_factory=dict)  # by tool call id
    approvals: dict[str, _Span] = field(default_factory=dict)  # by approval id
    decided: dict[str, _Span] = field(default_factory=dict)  # ended, verdict not logged yet
    state: str | None = None
    failure: str | None = None  # the latest failed model attempt's error
    gated: set[str] = field(default_factory=set)  # tool call ids that waited for a verdict
    attempts: dict[str, int] = field(default_factory=dict)  # by operation id
    last: Event | None = None
    model_id: str | None = None

    def open(self, span: _Span) -> _Span:
        self.spans.append(span)
        return span

    def end_leg(self, event: Event, status: str, detail: str) -> None:
        if self.leg is not None:
            self.leg.close(event.created_at, status, f"{self.leg.detail} leg, ended: {detail}")
            self.leg = None

    def interrupt(self, last: Event) -> None:
        """The leg in flight stopped without an end event: close what it had open."""
        for span in [*self.models.values(), *self.tools.values()]:
            if span.tool_call_id is not None and span.tool_call_id in self.gated:
                continue  # still waiting for its verdict, not interrupted
            span.close(last.created_at, "error", "interrupted: the leg stopped here")
        self.models.clear()
        self.tools = {k: v for k, v in self.tools.items() if k in self.gated}
        self.end_leg(last, "error", "interrupted: ended without an end event")


def spans(store: StoreLike, run_id: str) -> InspectFrame:
    """A run's spans from its event log: where its time went (index ``span``).

    One row per span, in the order of the events that open them. ``kind`` is
    ``leg`` (a stretch of the run in one process: ``run_started`` to the
    suspension, finish, error, retry wait or takeover that ends it),
    ``model_call`` (one per attempt), ``tool_call`` (a gated call from its
    verdict), ``approval_wait`` (request to verdict), ``retry_wait`` (a failed
    model attempt to the next claim), ``attention_wait`` (needs_attention, or a
    failed run that was retried, to the next claim), ``queue_wait`` (pending or
    queued to the claim) or ``takeover_gap`` (the last event of a leg that
    stopped without an end to the next leg's claim). Columns: ``kind``, ``name``
    (the model id, the tool name, the agent for legs and waits), ``step_index``
    (a leg's first step), ``start``, ``end`` (UTC datetimes, from the writers'
    clocks; ``end`` is missing while a span is open), ``duration_ms``,
    ``attempt`` (of a model call, per step), ``status`` (``ok``, ``error``: a
    failed attempt, an error result, a denial, an interruption; ``open``: not
    ended yet), ``tool_call_id`` and ``detail`` (one line: finish reason and
    tokens, the error, the verdict, the result preview, how a leg began or ended).

    Args:
        store: A store with an event log, or a store URL.
        run_id: The run.

    Raises:
        ConfigurationError: The store keeps no event log.
        RunNotFoundError: The run has no event.
    """
    from ._views import frame_module

    with opened(store) as source:
        logged, record = run_events(source, run_id)
    module = frame_module()
    return module.frame(  # type: ignore[no-any-return]
        span_rows(logged, record.agent_id if record is not None else None),
        columns=SPAN_COLUMNS,
        index="span",
        categories={"kind": SPAN_KINDS, "status": ("ok", "error", "open")},
        datetimes=("start", "end"),
        integers=("step_index", "duration_ms", "attempt"),
    )


def span_rows(events: Iterable[Event], agent: str | None = None) -> list[dict[str, Any]]:
    """One row per span, in the order of the events that open them.

    Args:
        events: The run's event log, in offset order.
        agent: The runtime's agent id, the legs' name (None for a loop run).
    """
    fold = _Fold(agent)
    for event in events:
        _apply(fold, event)
        if event.type != RUN_STATE:  # a claim's state change is not the old leg's last act
            fold.last = event
    fold.spans = [s for s in fold.spans if not (s.final and s.end is None)]
    for span in fold.spans:
        if span.kind == "model_call" and span.name is None:
            span.name = fold.model_id  # a failed attempt has no response naming its model
    rows = []
    for number, span in enumerate(sorted(fold.spans, key=lambda s: s.offset)):
        rows.append({"span": number, **span.row()})
    return rows


def _apply(fold: _Fold, event: Event) -> None:
    kind, payload, at = event.type, event.payload, event.created_at
    if kind == RUN_STATE:
        _state(fold, event, str(payload.get("state")))
    elif kind == RUN_TAKEN_OVER:
        _taken_over(fold, event)
    elif kind == RUN_STARTED:
        _leg_started(fold, event)
    elif kind == MODEL_ATTEMPT_STARTED:
        operation = event.operation_id or ""
        fold.attempts[operation] = fold.attempts.get(operation, 0) + 1
        fold.models[event.attempt_id or ""] = fold.open(
            _Span(
                "model_call",
                at,
                event.offset,
                step_index=event.step_index,
                attempt=fold.attempts[operation],
            )
        )
    elif kind == MODEL_COMPLETED:
        span = fold.models.pop(event.attempt_id or "", None)
        if span is not None:
            response = payload.get("response") or {}
            span.name = response.get("model_id") or None
            fold.model_id = span.name or fold.model_id
            span.close(at, "ok", _model_detail(response))
    elif kind == MODEL_ATTEMPT_FAILED:
        span = fold.models.pop(event.attempt_id or "", None)
        fold.failure = f"{payload.get('error_type')}: {payload.get('message')}"
        if span is not None:
            span.close(at, "error", fold.failure)
    elif kind == TOOL_CALL:
        _tool_called(fold, event)
    elif kind == TOOL_APPROVAL_REQUEST:
        _approval_requested(fold, event)
    elif kind == APPROVAL_RESOLVED:
        _approval_resolved(fold, event)
    elif kind == TOOL_RESULT:
        result = payload.get("result") or {}
        span = fold.tools.pop(str(result.get("tool_call_id")), None)
        if span is not None:
            error = bool(result.get("is_error"))
            span.close(at, "error" if error else "ok", _preview(result.get("result")))
    elif kind in (RUN_FINISHED, RUN_SUSPENDED):
        suspended = kind == RUN_SUSPENDED
        fold.end_leg(event, "ok", "suspended" if suspended else "finished")
    elif kind == RUN_ERROR:
        detail = payload.get("message") or payload.get("state") or "error"
        fold.end_leg(event, "error", str(detail))


def _state(fold: _Fold, event: Event, state: str) -> None:
    at = event.created_at
    if fold.state == "waiting_approval" and state != "waiting_approval":
        # The verdict moved the run on; the resumed leg logs approval_resolved later.
        for approval_id, span in fold.approvals.items():
            span.close(at, "ok")
            fold.decided[approval_id] = span
        fold.approvals.clear()
    fold.state = state
    if fold.wait is not None and state not in QUEUED_STATES:
        fold.wait.close(at, "ok")  # a retried run's wait lasts until its next claim
        fold.wait = None
    if state in _LEG_ENDS and fold.leg is not None:
        reason = event.payload.get("reason")
        detail = state if not reason else f"{state}: {reason}"
        status = "ok" if state in SETTLED_OK_STATES else "error"
        fold.end_leg(event, status, detail)
    if state == "cancelled":
        for span in fold.approvals.values():
            span.close(at, "error", "cancelled")
        fold.approvals.clear()
    wait = _WAITS.get(state)
    if wait is not None and fold.wait is None:
        reason = event.payload.get("reason")
        fold.wait = fold.open(
            _Span(
                wait,
                at,
                event.offset,
                name=fold.agent,
                detail=reason or (fold.failure if wait == "retry_wait" else None) or state,
                final=state == "failed",
            )
        )


def _taken_over(fold: _Fold, event: Event) -> None:
    last = fold.last
    if fold.leg is not None and last is not None:
        fold.interrupt(last)
    start = _previous_leg_end(fold, event)
    step = event.payload.get("step_index", event.step_index)
    gap = _Span(
        "takeover_gap",
        start,
        event.offset,
        name=fold.agent,
        step_index=step if isinstance(step, int) else None,
        detail=str(event.payload.get("message") or event.payload.get("cause") or ""),
    )
    gap.close(event.created_at, "ok")
    fold.gap = fold.open(gap)


def _previous_leg_end(fold: _Fold, event: Event) -> int:
    ended = [s.end for s in fold.spans if s.kind == "leg" and s.end is not None]
    return max(ended) if ended else event.created_at


def _leg_started(fold: _Fold, event: Event) -> None:
    last = fold.last
    if fold.leg is not None and last is not None:
        # A leg that never wrote its end: its process stopped and this one took over.
        fold.interrupt(last)
        if fold.gap is None:
            gap = _Span(
                "takeover_gap",
                last.created_at,
                last.offset,
                name=fold.agent,
                step_index=event.payload.get("next_step_index"),
                detail="the previous leg stopped without an end event; this leg took over",
            )
            gap.close(event.created_at, "ok")
            fold.open(gap)
    fold.gap = None
    if fold.wait is not None:
        fold.wait.close(event.created_at, "ok")
        fold.wait = None
    payload = event.payload
    for span in reversed(fold.spans):  # the waits that delayed this leg: name its step
        if span.kind == "leg":
            break
        if span.kind in _WAIT_KINDS and span.step_index is None:
            span.step_index = payload.get("next_step_index")
    how = "retried" if payload.get("retried") else "resumed" if payload.get("resumed") else "first"
    fold.leg = fold.open(
        _Span(
            "leg",
            event.created_at,
            event.offset,
            name=fold.agent,
            step_index=payload.get("next_step_index"),
            detail=how,
        )
    )


def _tool_called(fold: _Fold, event: Event) -> None:
    call = event.payload.get("tool_call") or {}
    call_id = str(call.get("tool_call_id"))
    earlier = fold.tools.pop(call_id, None)
    if earlier is not None:  # the call runs again (a takeover re-ran its step)
        earlier.close(event.created_at, "error", "interrupted: the call ran again")
    fold.tools[call_id] = fold.open(_call_span("tool_call", event, call))


def _approval_requested(fold: _Fold, event: Event) -> None:
    request = event.payload.get("request") or {}
    call_id = str(request.get("tool_call_id"))
    fold.gated.add(call_id)
    fold.approvals[str(request.get("approval_id"))] = fold.open(
        _call_span("approval_wait", event, request)
    )


def _call_span(kind: str, event: Event, call: dict[str, Any]) -> _Span:
    """A span of one tool call that ``event`` opens (``call``: its call or approval request)."""
    return _Span(
        kind,
        event.created_at,
        event.offset,
        name=call.get("tool_name"),
        step_index=event.step_index,
        tool_call_id=str(call.get("tool_call_id")),
    )


def _approval_resolved(fold: _Fold, event: Event) -> None:
    payload = event.payload
    call_id = str(payload.get("tool_call_id"))
    approved = bool(payload.get("approved"))
    approval_id = str(payload.get("approval_id"))
    wait = fold.approvals.pop(approval_id, None) or fold.decided.pop(approval_id, None)
    verdict = "approved" if approved else "denied"
    if payload.get("reason"):
        verdict += f": {payload['reason']}"
    if wait is not None:
        end = event.created_at if wait.end is None else wait.end
        wait.close(end, "ok" if approved else "error", verdict)
    fold.gated.discard(call_id)
    tool = fold.tools.get(call_id)
    if tool is not None:
        # The call's own time starts with its verdict: the wait is a span of its own.
        tool.start, tool.offset = event.created_at, event.offset
        if not approved:
            tool.close(event.created_at, "error", verdict)
            del fold.tools[call_id]


def _model_detail(response: dict[str, Any]) -> str:
    usage = response.get("usage") or {}
    tokens = usage.get("total_tokens")
    reason = str(response.get("finish_reason") or "")
    return f"{reason}, {tokens} tokens" if tokens is not None else reason


def _preview(value: Any) -> str:
    from ._rows import preview

    return preview(value, 80)
