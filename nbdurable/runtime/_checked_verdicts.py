"""A verdict from an untrusted front end: check its token and the run's state, then answer once.

Widgets (an approval card) and the HTTP bridge (an approval link) send back the
token they were given; it is verified with the runtime's signer, and must name
the approval and the run it claims to and be younger than the maximum age,
before the verdict is written. The write itself is the store's conditional
verdict write: of two verdicts on one approval, from any views or processes,
exactly one is recorded; the other learns which verdict won. The same verdict
sent again (a retry) gets the original answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._errors import (
    ApprovalExpiredError,
    ApprovalNotPendingError,
    ApproverNotAllowedError,
    EditNotAllowedError,
    InvalidEditError,
)
from ..durable._offload import offload
from ..durable._signer import bound_to_run, expired_age, request_still_signed, token_matches
from ..messages import ToolApprovalRequest, VerdictSource
from ._edits import check_reply
from ._in_flight import verdict_in_flight
from ._run import Run

if TYPE_CHECKING:
    from ._seam import RunControl

__all__ = ["RETIRED_KEY_MESSAGE", "Outcome", "OutcomeState", "submit_verdict"]

OutcomeState = Literal[
    "approved", "denied", "replied", "invalid token", "expired", "stale", "not allowed", "error"
]

_LOCKS: dict[tuple[int, str], asyncio.Lock] = {}

RETIRED_KEY_MESSAGE = (
    "not approved: the request was signed with a key that is no longer trusted (retired), "
    "or not signed, so it can only be denied (or the run forked); the run waits"
)
"""The answer to an approval of a request whose own token no longer verifies."""


class _RuntimeDefault:
    """The runtime's own ``approval_max_age_ms``."""


RUNTIME_DEFAULT = _RuntimeDefault()


@dataclass(frozen=True)
class Outcome:
    """What became of a verdict.

    Attributes:
        state: ``approved`` / ``denied`` / ``replied`` (recorded, now or by
            this same verdict before; an edit is ``approved``), ``invalid
            token`` (nothing recorded: the run still waits), ``expired`` (a
            genuine token past the maximum age: nothing recorded, the request
            still waits for a decision with a fresh token), ``stale`` (the
            request no longer waits: another verdict won, or the run moved on;
            nothing recorded), ``not allowed`` (the agent does not allow this
            principal to decide the call: nothing recorded, the request still
            waits) or ``error`` (nothing recorded: an edit the tool does not
            allow, or arguments that do not fit).
        message: One line for the card.
        winner: With ``stale``: the verdict that was recorded (``approved``,
            ``denied`` or ``replied``), or None when the run stopped waiting without one.
        refusal: With ``not allowed``: the error saying who may decide.
        edit_refusal: With ``error``: the typed error of an edit the tool does
            not allow (``EditNotAllowedError``) or arguments that do not fit
            (``InvalidEditError``); nothing was recorded, the request waits.
    """

    state: OutcomeState
    message: str
    winner: str | None = None
    refusal: ApproverNotAllowedError | None = None
    edit_refusal: EditNotAllowedError | InvalidEditError | None = None

    @property
    def recorded(self) -> bool:
        """Whether this verdict is the recorded one (the card is done)."""
        return self.state in ("approved", "denied", "replied")


_EXPIRED = Outcome(
    "expired",
    "this request's token expired: nothing was recorded and it still waits; "
    "decide again with a fresh token",
)


def _lock(runtime: RunControl, run_id: str) -> asyncio.Lock:
    # views of one run in this process take turns (the store decides across processes)
    return _LOCKS.setdefault((id(runtime.store), run_id), asyncio.Lock())


async def _open_request(run: Run, approval_id: str) -> ToolApprovalRequest | None:
    """The pending request ``approval_id`` when it still waits for a verdict, else None."""
    record = await offload(run.record)
    if record.state != "waiting_approval" or approval_id in record.verdicts:
        return None
    for request in await run.pending_approvals():
        if request.approval_id == approval_id:
            return request
    return None


def _stale(error: ApprovalNotPendingError) -> Outcome:
    if error.verdict is not None:
        return Outcome("stale", f"already {error.verdict} elsewhere", winner=error.verdict)
    where = f" (the run is {error.state})" if error.state else ""
    return Outcome("stale", f"already resolved: this request no longer waits{where}")


def _recorded(approve: bool, reason: str | None, edited: bool, reply: str | None) -> Outcome:
    if approve:
        # what happens next depends on who serves the agent: the notebook says it
        # (nbdurable.notebook's next_step), the bridge's page its own way
        return Outcome("approved", "approved with edited arguments" if edited else "approved")
    if reply is not None:
        return Outcome("replied", "replied in place of the tool")
    return Outcome("denied", f"denied: {reason}" if reason else "denied")


async def submit_verdict(
    runtime: RunControl,
    run_id: str,
    approval_id: str,
    *,
    approve: bool,
    token: object = None,
    reason: str | None = None,
    max_age_ms: int | _RuntimeDefault | None = RUNTIME_DEFAULT,
    source: VerdictSource | None = None,
    arguments: Mapping[str, Any] | None = None,
    reply: str | None = None,
) -> Outcome:
    """Approve (with the card's signed token) or deny (no token needed) one pending call.

    An approval is recorded only when ``runtime.signer.verify(token)`` accepts the
    token, its payload names ``approval_id`` and ``run_id``, it pins the pending
    call (tool, call id, input) and it is younger than ``max_age_ms`` (default:
    the runtime's ``approval_max_age_ms``), and when the request's own stored
    token still verifies (not signed with a key since retired); otherwise
    nothing is recorded and the run keeps waiting. ``source`` (who decides,
    and how) is recorded with the verdict, once the run's rule on who may
    decide allows it. With ``approve``, ``arguments`` edits the call (the
    token still binds the model's call; see :meth:`Run.approve`); without,
    ``reply`` answers it in place of the tool (:meth:`Run.respond`). An edit
    the tool does not allow, or arguments that do not fit, are an ``error``
    outcome and nothing is recorded. Never raises for
    a bad verdict: the outcome says what happened, and a ``stale`` one which
    verdict won.
    """
    max_age = runtime.approval_max_age_ms if isinstance(max_age_ms, _RuntimeDefault) else max_age_ms
    run = Run(runtime, run_id)
    kind = _Kind(approve, arguments if approve else None, None if approve else reply)
    with verdict_in_flight(run_id):
        return await _submit(run, approval_id, kind, token, reason, max_age, source)


@dataclass(frozen=True)
class _Kind:
    """What a verdict does: approve (maybe with edits), or deny (maybe with a reply)."""

    approve: bool
    arguments: Mapping[str, Any] | None
    reply: str | None


async def _submit(
    run: Run,
    approval_id: str,
    kind: _Kind,
    token: object,
    reason: str | None,
    max_age: int | None,
    source: VerdictSource | None,
) -> Outcome:
    runtime, run_id, approve = run.runtime, run.run_id, kind.approve
    async with _lock(runtime, run_id):
        try:
            request = await _open_request(run, approval_id)
            record = await offload(
                run.record
            )  # read after: a verdict seen missing there shows here
            answered = approval_id in record.decided or approval_id in record.verdicts
            if request is None and not answered:
                return _stale(ApprovalNotPendingError(run_id, approval_id, state=record.state))
            if approve and request is not None:
                payload = runtime.signer.verify(token)
                if (
                    payload is None
                    or payload.get("approval_id") != approval_id
                    or not bound_to_run(payload, run_id)
                    or not token_matches(
                        runtime.signer, str(token), request, run_id=run_id, max_age_ms=None
                    )
                ):
                    return Outcome("invalid token", "invalid token: not approved, the run waits")
                if not request_still_signed(runtime.signer, request):
                    return Outcome("invalid token", RETIRED_KEY_MESSAGE)
                if expired_age(runtime.signer, token, max_age) is not None:
                    return _EXPIRED
            # answered already: the store tells a repeat of the recorded verdict from a loser
            await run.record_verdict(
                approval_id,
                approved=approve,
                token=token if approve and isinstance(token, str) else None,
                reason=reason or None,
                max_age_ms=max_age,
                source=source,
                arguments=kind.arguments,
                reply=None if kind.reply is None else check_reply(kind.reply),
            )
            return _recorded(approve, reason, kind.arguments is not None, kind.reply)
        except ApprovalNotPendingError as lost:
            return _stale(lost)
        except ApproverNotAllowedError as refused:
            return Outcome("not allowed", f"not allowed: {refused}", refusal=refused)
        except ApprovalExpiredError:
            return _EXPIRED
        except (EditNotAllowedError, InvalidEditError) as refused:
            return Outcome("error", f"not recorded: {refused}", edit_refusal=refused)
        except Exception as exc:  # shown on the card; the run is left as it was
            return Outcome("error", f"error: {type(exc).__name__}: {exc}")
