"""The human's answers to AG-UI interrupts: a ``RunAgentInput``'s ``resume`` entries as verdicts.

Each entry answers one tool-call interrupt (its ``interruptId`` is the approval
id) and becomes one verdict, recorded by the bridge's one decision path
(:func:`~nbdurable.server._links.answer`): the same token, signing and principal
checks as ``POST /runs/{run_id}/approvals/{approval_id}``.

=================================================  ========================
resume entry                                       verdict
=================================================  ========================
``resolved``, ``{"approved": true}``               approve
``resolved``, ``{"approved": true, "editedArgs"}``  approve with edited arguments
``resolved``, ``{"approved": false, "reason"?}``   deny (the model reads the reason)
``resolved``, ``{"approved": false, "reply"}``     answer in place of the tool
``cancelled``                                      deny ("cancelled")
=================================================  ========================

Approving needs the call's signed token, echoed from the interrupt's
``metadata.nbdurable.token`` in the entry's own ``metadata.nbdurable.token``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ag_ui.core import ResumeEntry, RunAgentInput
from pydantic import ValidationError

from .._errors import ConfigurationError
from ..messages import VerdictSource
from ..runtime._checked_verdicts import Outcome
from ._agui import METADATA_KEY
from ._context import Bridge
from ._links import answer

__all__ = ["CANCELLED_REASON", "Answer", "answers_of", "record"]

CANCELLED_REASON = "cancelled from the front end"
"""The reason a ``cancelled`` resume entry's denial gives the model."""


@dataclass(frozen=True)
class Answer:
    """One resume entry as a verdict on one approval."""

    approval_id: str
    approve: bool
    token: str | None
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    reply: str | None = None


def answers_of(body: Any, run_id: str) -> list[Answer]:
    """The verdicts a ``RunAgentInput`` body gives for ``run_id``'s interrupts, checked first.

    Nothing is recorded here: a body with one bad entry gives no verdict at all.

    Raises:
        ConfigurationError: Not a ``RunAgentInput``, another thread, no
            ``resume`` entry, one interrupt answered twice, or an entry that
            is not an answer this endpoint understands (HTTP 422).
    """
    try:
        given = RunAgentInput.model_validate(body)
    except ValidationError as exc:
        where = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ConfigurationError(f"the body is not an AG-UI RunAgentInput ({where})") from None
    if given.thread_id != run_id:
        raise ConfigurationError(
            f"threadId {given.thread_id!r} is not this run: resume run {run_id!r} "
            "with its own id as the threadId"
        )
    if not given.resume:
        raise ConfigurationError(
            "no resume entries: this endpoint answers the interrupts of a run "
            "(RunAgentInput.resume), it does not start one"
        )
    answers = [_answer(entry) for entry in given.resume]
    seen: set[str] = set()
    for found in answers:
        if found.approval_id in seen:
            raise ConfigurationError(f"interrupt {found.approval_id!r} is answered twice")
        seen.add(found.approval_id)
    return answers


def _answer(entry: ResumeEntry) -> Answer:
    interrupt = entry.interrupt_id
    metadata = entry.metadata.get(METADATA_KEY) if isinstance(entry.metadata, dict) else None
    token = metadata.get("token") if isinstance(metadata, dict) else None
    if token is not None and not isinstance(token, str):
        raise ConfigurationError(f"interrupt {interrupt!r}: metadata.nbdurable.token is a string")
    if entry.status == "cancelled":
        return Answer(interrupt, approve=False, token=token, reason=CANCELLED_REASON)
    payload = entry.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        raise ConfigurationError(
            f"interrupt {interrupt!r}: a resolved entry's payload is an object with a "
            'boolean "approved" (and "editedArgs", "reply" or "reason")'
        )
    unknown = sorted(set(payload) - {"approved", "editedArgs", "reply", "reason"})
    if unknown:
        raise ConfigurationError(f"interrupt {interrupt!r}: unknown payload keys {unknown}")
    approve = payload["approved"]
    edited, reply, reason = payload.get("editedArgs"), payload.get("reply"), payload.get("reason")
    if edited is not None and (not isinstance(edited, dict) or not approve):
        raise ConfigurationError(
            f"interrupt {interrupt!r}: editedArgs is an object of arguments, with approved: true"
        )
    if reply is not None and (not isinstance(reply, str) or approve):
        raise ConfigurationError(
            f"interrupt {interrupt!r}: reply is a string, with approved: false"
        )
    if reason is not None and (not isinstance(reason, str) or approve):
        raise ConfigurationError(
            f"interrupt {interrupt!r}: reason is a string, with approved: false"
        )
    return Answer(interrupt, approve, token, reason=reason, arguments=edited, reply=reply)


async def record(bridge: Bridge, run_id: str, given: Answer, principal: str | None) -> Outcome:
    """Record one verdict through the bridge's decision path, as ``principal`` over HTTP.

    Raises:
        The errors of :func:`~nbdurable.server._links.answer`: the token,
        the principal, a verdict that won already, an edit the tool does not
        allow or arguments that do not fit its schema.
    """
    source = VerdictSource(by=principal, authenticated=principal is not None, via="http")
    return await answer(
        bridge, run_id, given.approval_id, given, token_required=False, source=source
    )
