"""The event a new owner writes when it takes a run over from a lapsed or dead owner."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..events._model import RUN_TAKEN_OVER, NewEvent
from ..messages import Message
from ..runs import RuntimeRun, ToolIntent, describe_holder, process_gone

__all__ = ["OWNER_GONE", "LEASE_LAPSED", "interrupted_calls", "takeover_event"]

OWNER_GONE = "owner_gone"
"""The previous owner's process no longer exists on this host: it was taken over at once."""
LEASE_LAPSED = "lease_lapsed"
"""The previous owner stopped renewing its lease (paused, cut off, crashed on another host)."""


def interrupted_calls(
    intents: Iterable[ToolIntent], messages: Sequence[Message]
) -> list[ToolIntent]:
    """The calls an owner started and whose result the checkpoint does not hold.

    A ``started`` intent whose result is in the checkpoint finished: its
    ``completed`` intent waited for a later commit the owner did not make.
    """
    started = [i for i in intents if i.state == "started"]
    if not started:
        return []
    # From the end: the results of the calls an owner started are among the last
    # messages, and a 5,000-step history is not scanned to find them (issue 42).
    missing = {i.tool_call_id for i in started}
    for message in reversed(messages):
        for result in message.tool_results:
            missing.discard(result.tool_call_id)
        if not missing:
            return []
    return [i for i in started if i.tool_call_id in missing]


def takeover_event(
    record: RuntimeRun,
    *,
    now: int,
    step_index: int | None = None,
    phase: int | None = None,
    interrupted: Sequence[ToolIntent] = (),
    recovery_of: Callable[[str], str] | None = None,
) -> NewEvent | None:
    """The ``run_taken_over`` event of a claim, or None when the claim took a released run.

    Args:
        record: The run as this owner claimed it (``previous_owner`` set by a takeover).
        now: The event's time, epoch ms.
        step_index: The step that runs again (an agent run).
        phase: The phase that runs again (a task run).
        interrupted: Tool calls the previous owner started and did not complete.
        recovery_of: A tool's recovery policy, by tool name.
    """
    previous = record.previous_owner
    if previous is None:
        return None
    gone = process_gone(previous)
    cause = OWNER_GONE if gone else LEASE_LAPSED
    why = (
        "its process was gone"
        if gone
        else "its lease lapsed (it may still be running: paused, cut off or on another host)"
    )
    calls: list[dict[str, Any]] = [
        {
            "tool_call_id": intent.tool_call_id,
            "tool_name": intent.tool_name,
            "recovery": recovery_of(intent.tool_name) if recovery_of is not None else None,
        }
        for intent in interrupted
    ]
    if phase is not None:
        where = f"phase {phase} runs again"
    elif step_index is not None:
        where = f"step {step_index} runs again"
    else:
        where = "it starts again"
    message = f"Taken over from {describe_holder(previous)}: {why}; {where}"
    if calls:
        names = ", ".join(
            f"{c['tool_name']} ({c['tool_call_id']}{', ' + c['recovery'] if c['recovery'] else ''})"
            for c in calls
        )
        message += f"; interrupted tool call(s): {names}"
    payload: dict[str, Any] = {
        "previous_owner": previous,
        "owner": record.lease_owner,
        "cause": cause,
        "fence": record.fence,
        "step_index": step_index,
        "tool_calls": calls,
        "message": message + ".",
    }
    if phase is not None:
        payload["phase"] = phase
    return NewEvent(type=RUN_TAKEN_OVER, step_index=step_index, created_at=now, payload=payload)
