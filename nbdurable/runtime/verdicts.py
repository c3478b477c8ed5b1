"""A verdict from an untrusted front end: check its token and the run's state, then answer once.

Widgets (an approval card) and the HTTP bridge (an approval link) send back the
token they were given; it is verified with the runtime's signer, and must name
the approval and the run it claims to, before ``Run.approve`` is called; a
request that is no longer pending (approved from another view or the CLI, or
already answered) is never answered again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..durable.signer import bound_to_run, token_matches
from ..messages import ToolApprovalRequest
from .run import Run

if TYPE_CHECKING:
    from .runtime import DurableRuntime

__all__ = ["Outcome", "OutcomeState", "submit_verdict"]

OutcomeState = Literal["approved", "denied", "invalid token", "stale", "error"]

_LOCKS: dict[tuple[int, str], asyncio.Lock] = {}


@dataclass(frozen=True)
class Outcome:
    """What became of a verdict.

    Attributes:
        state: ``approved`` / ``denied`` (recorded; the run resumes), ``invalid
            token`` (nothing recorded: the run still waits), ``stale`` (the
            request was no longer pending: nothing recorded) or ``error``.
        message: One line for the card.
    """

    state: OutcomeState
    message: str

    @property
    def recorded(self) -> bool:
        """Whether this verdict was recorded (the card is done)."""
        return self.state in ("approved", "denied")


def _lock(runtime: DurableRuntime, run_id: str) -> asyncio.Lock:
    # one verdict at a time per run in this process: two views of one run never race
    return _LOCKS.setdefault((id(runtime.store), run_id), asyncio.Lock())


async def _open_request(run: Run, approval_id: str) -> ToolApprovalRequest | None:
    """The pending request ``approval_id`` when it still waits for a verdict, else None."""
    record = run.record()
    if record.state != "waiting_approval" or approval_id in record.verdicts:
        return None
    for request in await run.pending_approvals():
        if request.approval_id == approval_id:
            return request
    return None


async def submit_verdict(
    runtime: DurableRuntime,
    run_id: str,
    approval_id: str,
    *,
    approve: bool,
    token: object = None,
    reason: str | None = None,
) -> Outcome:
    """Approve (with the card's signed token) or deny (no token needed) one pending call.

    An approval is recorded only when ``runtime.signer.verify(token)`` accepts the
    token, its payload names ``approval_id`` and ``run_id``, and it pins the
    pending call (tool, call id, input); otherwise nothing is recorded and the
    run keeps waiting. Never raises for a bad verdict: the outcome says what happened.
    """
    run = Run(runtime, run_id)
    async with _lock(runtime, run_id):
        try:
            request = await _open_request(run, approval_id)
            if request is None:
                return Outcome("stale", "already resolved: this request no longer waits")
            if approve:
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
                await run.approve(approval_id, token=str(token))
                return Outcome("approved", "approved: the run resumes")
            await run.deny(approval_id, reason=reason or None)
            detail = f": {reason}" if reason else ""
            return Outcome("denied", f"denied{detail}")
        except Exception as exc:  # shown on the card; the run is left as it was
            return Outcome("error", f"error: {type(exc).__name__}: {exc}")
