"""The four verdicts a view can send (approve, deny, edit, reply), read and submitted alike.

A run view's card and a dashboard row send the same messages (:mod:`._messages`);
this module turns one into a :class:`VerdictKind`, refusing a malformed edit or
reply before anything reaches the runtime, and submits it through
:func:`~nbdurable.runtime._checked_verdicts.submit_verdict`, which checks the
token (approvals and edits: it binds the call as the model made it), the
edited arguments against the tool's schema, and who may decide.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..._display import call_text
from ...messages import VerdictSource
from ...runtime._checked_verdicts import Outcome, submit_verdict
from .._next_step import confirmed
from .._session import deciding_user

if TYPE_CHECKING:
    from ...runtime._runtime import DurableRuntime

__all__ = ["REPLY_MAX_CHARS", "VerdictKind", "submit_kind", "verdict_kind"]

REPLY_MAX_CHARS = 20_000
"""The longest reply a view may send (the model reads it whole, as the call's result)."""


@dataclass(frozen=True)
class VerdictKind:
    """What a view asks for.

    Attributes:
        approve: True for approve and edit, False for deny and reply.
        reason: A denial's reason (what the model reads in the error result).
        arguments: An edit's arguments (the call runs with them instead).
        reply: A reply's text (the call's result; the tool does not run).
    """

    approve: bool
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    reply: str | None = None


def verdict_kind(message: Any) -> VerdictKind | str:
    """The verdict a view's ``approve``/``deny``/``grant``/``edit``/``reply`` message asks for.

    Returns:
        The verdict, or one line saying what is wrong with the message (an edit
        whose arguments are not a JSON object, an empty or overlong reply):
        nothing is submitted then.
    """
    action = message.get("type")
    if action == "deny":
        reason = message.get("reason")
        return VerdictKind(approve=False, reason=str(reason) if reason else None)
    if action == "edit":
        arguments = message.get("arguments")
        if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
            return "error: the edited arguments are not a JSON object; nothing was sent"
        return VerdictKind(approve=True, arguments=dict(arguments))
    if action == "reply":
        text = message.get("text")
        if not isinstance(text, str) or not text.strip():
            return "error: the reply is empty: type what the model reads as the call's result"
        if len(text) > REPLY_MAX_CHARS:
            return f"error: the reply is longer than {REPLY_MAX_CHARS:,} characters"
        return VerdictKind(approve=False, reply=text)
    return VerdictKind(approve=True)  # approve, and grant (which approves this call too)


async def submit_kind(
    runtime: DurableRuntime,
    run_id: str,
    approval_id: str,
    kind: VerdictKind,
    *,
    token: object,
    tool_name: str = "",
) -> Outcome:
    """Submit ``kind`` checked like every verdict from a view; never raises for a bad one.

    It is recorded as the notebook user's, via ``widget``. An edit whose
    arguments do not fit the tool's schema, or for a tool that does not allow
    editing, comes back as an ``error`` outcome carrying the typed error's name
    and message; nothing is recorded and the request still waits. A recorded
    verdict's message says what happens next: here, on a worker, or it waits.
    """
    outcome = await submit_verdict(
        runtime,
        run_id,
        approval_id,
        approve=kind.approve,
        token=token,
        reason=kind.reason,
        arguments=kind.arguments,
        reply=kind.reply,
        source=VerdictSource(by=deciding_user(), via="widget"),
    )
    if not outcome.recorded:
        return outcome
    said = outcome.message
    if kind.arguments is not None:
        ran = call_text(tool_name, kind.arguments) if tool_name else "the edited call"
        said = f"approved with edited arguments: {ran}"
    elif kind.reply is not None:
        said = "replied: the model reads the reply as the call's result"
    return replace(outcome, message=await confirmed(runtime, run_id, said))
