"""What the run view shows, as JSON: a folded event log plus this view's approval cards.

Pure functions over :class:`nbdurable.events.RunView`: the widget calls them when it
flushes, and a late or re-rendered view gets the same complete picture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...durable._signer import token_issued_at
from ...events._fold import RunView, StepView
from ...events._model import APPROVAL_RESOLVED, RUN_STATE, Event
from ...inspect._rows import usage_columns
from ...messages import ToolApprovalRequest, Usage
from ...runs import (
    BUSY_STATES,
    QUEUED_STATES,
    TERMINAL_STATES,
    UNSUCCESSFUL_STATES,
    Stalled,
    decided_phrase,
)
from .._lease import LeaseWait
from ._verdict_kinds import VerdictKind

__all__ = [
    "ANSWERED_CARD",
    "ENDED_STATES",
    "Cards",
    "Clock",
    "button_words",
    "progress",
    "run_state",
    "summary",
]

ENDED_STATES = frozenset({*TERMINAL_STATES, "error"})
"""View statuses after which the elapsed-time clock stops."""

ANSWERED_CARD = frozenset({"approved", "denied", "replied"})
"""Card states after which the card takes no verdict (``replied``: answered in the tool's place)."""
_ANSWERED = ANSWERED_CARD


@dataclass
class Cards:
    """The approval cards a view keeps: every request it saw, and what became of it.

    Attributes:
        requests: Every request seen pending, in order of arrival.
        requested_at: When each request was made (epoch ms).
        resolved: ``approval_resolved`` payloads from the log (whoever answered),
            with the event's time as ``decided_at``.
        outcomes: ``(state, message)`` of verdicts given through this view
            (``sending`` while one is being checked).
        decided: ``(decided_at, verdict)`` of verdicts recorded through this view.
    """

    requests: dict[str, ToolApprovalRequest] = field(default_factory=dict)
    requested_at: dict[str, int] = field(default_factory=dict)
    resolved: dict[str, dict[str, Any]] = field(default_factory=dict)
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)
    decided: dict[str, tuple[int, VerdictKind]] = field(default_factory=dict)

    def observe(self, view: RunView, event: Event) -> None:
        """Note the requests pending after ``event`` and the verdicts it records."""
        if event.type == APPROVAL_RESOLVED:
            payload = {**event.payload, "decided_at": event.created_at}
            self.resolved[str(event.payload.get("approval_id"))] = payload
        for approval_id, request in view.pending_approvals.items():
            if approval_id not in self.requests:
                self.requests[approval_id] = request
                issued = token_issued_at(request.token)
                self.requested_at[approval_id] = issued if issued else event.created_at

    def card(self, view: RunView, approval_id: str) -> dict[str, Any]:
        """One card as the front-end renders it (the signed token, never the secret).

        An answered card (``approved``, ``denied``, ``replied``, or ``resolved``
        when the request went away unanswered) carries ``decided_at`` (epoch ms,
        0 when unknown), the denial's ``reason``, an edit's ``edited_args`` and a
        reply's text: the view collapses it to one line. ``allow_edit`` and
        ``parameters`` (the tool's JSON schema) say whether, and how, the view
        offers Edit.
        """
        request = self.requests[approval_id]
        state, message = self._state(view, approval_id)
        decided_at, reason, source = 0, None, None
        edited: Any = None
        reply: Any = None
        resolved = self.resolved.get(approval_id)
        if resolved is not None:
            decided_at, reason = int(resolved.get("decided_at") or 0), resolved.get("reason")
            source = resolved.get("source")
            edited, reply = resolved.get("arguments"), resolved.get("reply")
        elif approval_id in self.decided:
            decided_at, kind = self.decided[approval_id]
            reason, edited, reply = kind.reason, kind.arguments, kind.reply
        return {
            "approval_id": approval_id,
            "tool_call_id": request.tool_call_id,
            "tool_name": request.tool_name,
            "args": request.input,
            "agent_path": list(request.agent_path),
            "requested_at": self.requested_at.get(approval_id, 0),
            "token": request.token or "",
            "state": state,
            "message": message,
            "decided_at": decided_at if state in _ANSWERED else 0,
            "reason": (reason or "") if state == "denied" else "",
            "decided_by": self._decided_by(approval_id, state, source, decided_at),
            "allow_edit": bool(request.allow_edit),
            "parameters": request.parameters if request.allow_edit else None,
            "edited_args": edited if state == "approved" and isinstance(edited, dict) else None,
            "reply": reply if state == "replied" and isinstance(reply, str) else "",
        }

    def _decided_by(
        self, approval_id: str, state: str, source: dict[str, Any] | None, decided_at: int
    ) -> str:
        """``by ana, 2 min after the request`` for an answered card, else empty.

        The card drops the records' ``(claimed)``: in a notebook every name is the
        one the kernel claims (its user), so the word says nothing to its reader.
        """
        if state not in _ANSWERED:
            return ""
        requested_at = self.requested_at.get(approval_id, 0)
        waited = decided_at - requested_at if decided_at and requested_at else None
        return decided_phrase(source, waited).replace(" (claimed)", "", 1)

    def _state(self, view: RunView, approval_id: str) -> tuple[str, str]:
        outcome = self.outcomes.get(approval_id)
        if outcome is not None and outcome[0] in (*ANSWERED_CARD, "sending"):
            return outcome
        resolved = self.resolved.get(approval_id)
        if resolved is not None:
            if resolved.get("reply") is not None:
                return "replied", "replied in place of the tool"
            verdict = "approved" if resolved.get("approved") else "denied"
            reason = resolved.get("reason")
            return verdict, f"{verdict}{f': {reason}' if reason and verdict == 'denied' else ''}"
        if approval_id in view.pending_approvals and view.status not in ENDED_STATES:
            return outcome if outcome is not None else ("pending", "")
        return "resolved", "no longer pending"


@dataclass
class Clock:
    """First and latest event times of a run (epoch ms)."""

    started_at: int = 0
    ended_at: int = 0

    def observe(self, event: Event) -> None:
        """Note one event's time."""
        if not self.started_at:
            self.started_at = event.created_at
        if event.type != RUN_STATE or event.payload.get("state") not in QUEUED_STATES:
            self.ended_at = event.created_at


def run_state(
    view: RunView,
    cards: Cards,
    clock: Clock,
    *,
    max_steps: int = 0,
    lease: LeaseWait | None = None,
    stalled: Stalled | None = None,
    now: int | None = None,
) -> dict[str, Any]:
    """The synced state of a run view: status, steps, full text, usage, cards, times.

    Args:
        view: The folded event log.
        cards: The view's approval cards.
        clock: The run's first and latest event times.
        max_steps: The run's step budget (0 when unknown, e.g. a loop-API run).
        lease: Another runtime's lease the run waits for, if any.
        stalled: The run's stopped owner, when nobody executes the running run.
        now: The time (epoch ms) to count the lease's time left from (default: now).
    """
    # a gated call's result arrives in the leg that resumes the run, under a later step
    results = {r.get("tool_call_id"): r for step in view.steps.values() for r in step.tool_results}
    steps = [_step(view.steps[i], results, view.status) for i in sorted(view.steps)]
    text = "\n\n".join(s["text"] for s in steps if s["text"])
    approvals = [cards.card(view, a) for a in cards.requests]
    usage = _current_usage(view)
    return {
        "status": view.status,
        "step": max(view.steps) if view.steps else 0,
        "steps": steps,
        "text": text,
        "usage": usage_columns(usage),
        "approvals": approvals,
        "error": view.error or "",
        "takeover": view.takeover,
        "late_results": list(view.late_results),
        "started_at": clock.started_at,
        "ended_at": clock.ended_at if view.status in ENDED_STATES else 0,
        "last_offset": view.last_offset,
        "max_steps": max_steps,
        "progress": progress(len(view.steps), max_steps, usage),
        "summary": summary(view, approvals, lease, now, stalled),
        "stalled": stalled is not None and view.status not in ENDED_STATES,
        "lease_until": lease.until if lease is not None else 0,
        "lease_owner": lease.owner if lease is not None else "",
    }


def progress(steps: int, max_steps: int, usage: Usage) -> str:
    """How far a run got: ``3 steps (budget 12) · 1,234 tokens · $0.0012``.

    The budget is a limit, not a goal: said in brackets, never as ``3 of 12``
    (which reads as progress towards 12). ``3 steps`` without a budget; the cost
    when the model has a price.
    """
    line = f"{steps} step{'' if steps == 1 else 's'}"
    if max_steps:
        line += f" (budget {max_steps})"
    if usage.total_tokens:
        line += f" · {usage.total_tokens:,} tokens"
    if usage.cost is not None:
        line += f" · ${usage.cost:.4f}"
    return line


def summary(
    view: RunView,
    approvals: list[dict[str, Any]],
    lease: LeaseWait | None = None,
    now: int | None = None,
    stalled: Stalled | None = None,
) -> str:
    """Why the run stopped, or what it waits for, in one line."""
    status, reason = view.status, view.error or ""
    if stalled is not None and status not in ENDED_STATES:
        return stalled.text(now)  # the record says running; its owner stopped
    if lease is not None and status not in ENDED_STATES:
        return lease.text(now)  # the record says another runtime holds the run
    if status == "completed":
        finish = view.finish_reason
        return "completed" if finish in (None, "stop") else f"completed ({finish})"
    if status in UNSUCCESSFUL_STATES:
        return f"{status}: {reason}" if reason else status
    if status in _WITH_REASON:
        said = _WITH_REASON[status]
        return f"{said}: {button_words(reason)}" if reason else said
    if status == "waiting_approval":
        open_ = [c["tool_name"] for c in approvals if c["state"] not in ("resolved", *_ANSWERED)]
        return f"waiting for approval: {', '.join(open_)}" if open_ else "waiting for approval"
    return _WAITING.get(status, "")


_API_WORDS = (
    ("retry() runs it again, deny() settles it", "Retry runs it again, Settle denies it"),
    ("before retry()", "before you Retry"),
)


def button_words(reason: str) -> str:
    """A run's reason in the words of the views' buttons, not the Python API's.

    The runtime says ``retry() runs it again, deny() settles it``; a view that
    shows **Retry** and **Settle** says that instead.
    """
    for api, buttons in _API_WORDS:
        reason = reason.replace(api, buttons)
    return reason


_WITH_REASON = {"error": "stopped by an error", "needs_attention": "needs attention"}
_WAITING = {
    "suspended": "suspended: waiting for approvals or client tool results",
    "retry_wait": "the model call failed: retrying after a pause",
    "queued": "queued behind an unfinished run of its session",
    "pending": "waiting for a runtime serving its agent to take it",
    "cancelling": "cancelling",
    "running": "running",
}
"""What a run in each of these states waits for (or does), in one line."""


def _call_state(result: dict[str, Any] | None, status: str) -> str:
    """``done``, ``error``, ``running``, ``waiting`` or ``interrupted``."""
    if result is not None:
        return "error" if result.get("is_error") else "done"
    if status in BUSY_STATES:
        return "running"
    if status in ("waiting_approval", "suspended"):
        return "waiting"  # for its approval, or behind a call that waits for one
    return "interrupted"  # needs_attention, failed, cancelled: it never finished


def _step(step: StepView, results: dict[Any, dict[str, Any]], status: str) -> dict[str, Any]:
    calls = []
    for call in step.tool_calls:
        result = results.get(call.get("tool_call_id"))
        calls.append(
            {
                "tool_call_id": call.get("tool_call_id", ""),
                "tool_name": call.get("tool_name", ""),
                "args": call.get("args", {}),
                "done": result is not None,
                "result": None if result is None else result.get("result"),
                "is_error": bool(result and result.get("is_error")),
                "state": _call_state(result, status),
            }
        )
    return {
        "index": step.step_index,
        "text": step.text or step.provisional_text,
        "streaming": bool(step.provisional_text) and not step.text,
        "attempts": step.attempts,
        "tool_calls": calls,
        "finish_reason": step.finish_reason or "",
        "usage": usage_columns(step.usage) if step.usage is not None else None,
    }


def _current_usage(view: RunView) -> Usage:
    """The run's usage so far: the last leg's total, or the steps finished since, if more."""
    running = Usage()
    for step in view.steps.values():
        if step.usage is not None:
            running = running + step.usage
    return running if running.total_tokens > view.usage.total_tokens else view.usage
