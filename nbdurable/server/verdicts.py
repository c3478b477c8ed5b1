"""One path for every verdict that arrives over HTTP: checked, then ``submit_verdict``."""

from __future__ import annotations

from .._errors import ApprovalExpiredError, ApprovalNotPendingError, DurableConflictError
from ..durable.offload import offload
from ..runtime.verdicts import Outcome, submit_verdict
from .context import Bridge
from .errors import ApprovalTokenError
from .links import check_link_token, pending_request, precheck_token

__all__ = ["VerdictError", "answer"]


class VerdictError(DurableConflictError):
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

    While the request is pending, the token (needed to approve, and for any
    verdict when ``token_required``, as on an approval link) must verify with
    the runtime's signer, be younger than the bridge's max age, and name this
    run, this approval and this call. ``submit_verdict`` then checks it again
    and the store's conditional write records it, unless another verdict won
    meanwhile. The same verdict sent again (a client retrying after a timeout)
    answers as the first time did.

    Raises:
        RunNotFoundError: No such run.
        ApprovalNotPendingError: Another verdict won (``verdict`` names it), or
            the run does not wait for this approval.
        ApprovalTokenError: The token is forged, altered or bound elsewhere.
        ApprovalExpiredError: A genuine token past the max age: ask for a new link.
        VerdictError: The runtime refused the verdict.
    """
    runtime = bridge.runtime
    max_age = bridge.approval_max_age_ms
    if token_required:
        precheck_token(
            runtime.signer, token, run_id=run_id, approval_id=approval_id, max_age_ms=max_age
        )
    request = await pending_request(runtime, run_id, approval_id)
    if request is not None and (approve or token_required):
        check_link_token(runtime.signer, token, request, run_id=run_id, max_age_ms=max_age)
    outcome = await submit_verdict(
        runtime,
        run_id,
        approval_id,
        approve=approve,
        token=token,
        reason=reason,
        max_age_ms=max_age,
    )
    if outcome.state == "invalid token":
        raise ApprovalTokenError(outcome.message)
    if outcome.state == "expired":
        # the token aged past the limit between the checks: the same answer as theirs
        raise ApprovalExpiredError(
            approval_id, max_age_ms=max_age, message=f"{outcome.message}: ask for a new link"
        )
    if outcome.state == "stale":
        record = await offload(runtime.runtime_store.rt_get, run_id)
        raise ApprovalNotPendingError(
            run_id,
            approval_id,
            verdict=outcome.winner,
            state=record.state if record is not None else None,
        )
    if outcome.state == "error":
        raise VerdictError(outcome.message)
    return outcome
