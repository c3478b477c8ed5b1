"""One path for every verdict that arrives over HTTP: checked, then ``submit_verdict``."""

from __future__ import annotations

from ..runtime.verdicts import Outcome, submit_verdict
from .context import Bridge
from .errors import ApprovalNotPendingError, ApprovalTokenError
from .links import check_link_token, open_request, precheck_token

__all__ = ["VerdictError", "answer"]


class VerdictError(ApprovalNotPendingError):
    """The verdict could not be recorded; the run is left as it was."""


async def answer(
    bridge: Bridge,
    run_id: str,
    approval_id: str,
    *,
    approve: bool,
    token: str | None,
    reason: str | None,
    token_required: bool,
) -> Outcome:
    """Record a verdict, or raise a typed error and change nothing.

    The request must still be pending; the token (needed to approve, and for
    any verdict when ``token_required``, as on an approval link) must verify
    with the runtime's signer, be younger than the bridge's max age, and name
    this run, this approval and this call. ``submit_verdict`` then checks it
    again under the run's verdict lock and answers once.

    Raises:
        RunNotFoundError: No such run.
        ApprovalNotPendingError: The approval does not wait (answered already).
        ApprovalTokenError: The token is forged, altered, expired or bound elsewhere.
        VerdictError: The runtime refused the verdict.
    """
    runtime = bridge.runtime
    if token_required:
        precheck_token(
            runtime.signer,
            token,
            run_id=run_id,
            approval_id=approval_id,
            max_age_ms=bridge.approval_max_age_ms,
        )
    request = await open_request(runtime, run_id, approval_id)
    if approve or token_required:
        check_link_token(
            runtime.signer,
            token,
            request,
            run_id=run_id,
            max_age_ms=bridge.approval_max_age_ms,
        )
    outcome = await submit_verdict(
        runtime, run_id, approval_id, approve=approve, token=token, reason=reason
    )
    if outcome.state == "invalid token":
        raise ApprovalTokenError(outcome.message)
    if outcome.state == "stale":
        raise ApprovalNotPendingError(outcome.message)
    if outcome.state == "error":
        raise VerdictError(outcome.message)
    return outcome
