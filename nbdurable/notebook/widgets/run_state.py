"""What the run view shows, as JSON: a folded event log plus this view's approval cards.

Pure functions over :class:`nbdurable.events.RunView`: the widget calls them when it
flushes, and a late or re-rendered view gets the same complete picture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...durable.signer import token_issued_at
from ...events.fold import RunView, StepView
from ...events.model import APPROVAL_RESOLVED, RUN_STATE, TERMINAL_RUN_STATES, Event
from ...messages import ToolApprovalRequest, Usage

__all__ = ["ENDED_STATES", "Cards", "Clock", "run_state"]

ENDED_STATES = frozenset({*TERMINAL_RUN_STATES, "error"})
"""View statuses after which the elapsed-time clock stops."""


@dataclass
class Cards:
    """The approval cards a view keeps: every request it saw, and what became of it.

    Attributes:
        requests: Every request seen pending, in order of arrival.
        requested_at: When each request was made (epoch ms).
        resolved: ``approval_resolved`` payloads from the log (whoever answered).
        outcomes: ``(state, message)`` of verdicts given through this view
            (``sending`` while one is being checked).
    """

    requests: dict[str, ToolApprovalRequest] = field(default_factory=dict)
    requested_at: dict[str, int] = field(default_factory=dict)
    resolved: dict[str, dict[str, Any]] = field(default_factory=dict)
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)

    def observe(self, view: RunView, event: Event) -> None:
        """Note the requests pending after ``event`` and the verdicts it records."""
        if event.type == APPROVAL_RESOLVED:
            self.resolved[str(event.payload.get("approval_id"))] = dict(event.payload)
        for approval_id, request in view.pending_approvals.items():
            if approval_id not in self.requests:
                self.requests[approval_id] = request
                issued = token_issued_at(request.token)
                self.requested_at[approval_id] = issued if issued else event.created_at

    def card(self, view: RunView, approval_id: str) -> dict[str, Any]:
        """One card as the front-end renders it (the signed token, never the secret)."""
        request = self.requests[approval_id]
        state, message = self._state(view, approval_id)
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
        }

    def _state(self, view: RunView, approval_id: str) -> tuple[str, str]:
        outcome = self.outcomes.get(approval_id)
        if outcome is not None and outcome[0] in ("approved", "denied", "sending"):
            return outcome
        resolved = self.resolved.get(approval_id)
        if resolved is not None:
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
        if event.type != RUN_STATE or event.payload.get("state") not in ("queued", "pending"):
            self.ended_at = event.created_at


def run_state(view: RunView, cards: Cards, clock: Clock) -> dict[str, Any]:
    """The synced state of a run view: status, steps, full text, usage, cards, times."""
    # a gated call's result arrives in the leg that resumes the run, under a later step
    results = {r.get("tool_call_id"): r for step in view.steps.values() for r in step.tool_results}
    steps = [_step(view.steps[i], results) for i in sorted(view.steps)]
    text = "\n\n".join(s["text"] for s in steps if s["text"])
    return {
        "status": view.status,
        "step": max(view.steps) if view.steps else 0,
        "steps": steps,
        "text": text,
        "usage": _usage(_current_usage(view)),
        "approvals": [cards.card(view, a) for a in cards.requests],
        "error": view.error or "",
        "takeover": view.takeover,
        "started_at": clock.started_at,
        "ended_at": clock.ended_at if view.status in ENDED_STATES else 0,
        "last_offset": view.last_offset,
    }


def _step(step: StepView, results: dict[Any, dict[str, Any]]) -> dict[str, Any]:
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
            }
        )
    return {
        "index": step.step_index,
        "text": step.text or step.provisional_text,
        "streaming": bool(step.provisional_text) and not step.text,
        "attempts": step.attempts,
        "tool_calls": calls,
        "finish_reason": step.finish_reason or "",
        "usage": _usage(step.usage) if step.usage is not None else None,
    }


def _current_usage(view: RunView) -> Usage:
    """The run's usage so far: the last leg's total, or the steps finished since, if more."""
    running = Usage()
    for step in view.steps.values():
        if step.usage is not None:
            running = running + step.usage
    return running if running.total_tokens > view.usage.total_tokens else view.usage


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cost": usage.cost,
    }
