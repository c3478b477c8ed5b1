"""Approval links: a URL for one pending approval, carrying a signed token bound to it.

Minting needs no web framework: a notebook prints a link for a server that runs
elsewhere (with the same store and approval secret). The token in a link is
signed freshly by the runtime's signer for the run and the pinned call, so a
``max_age`` counts from when the link was made; it approves or denies that one
call once, and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from ..durable.offload import offload
from ..durable.signer import ApprovalSigner, bound_to_run, expired_age, token_matches
from ..messages import ToolApprovalRequest
from ..runtime.run import Run, approval_expired
from .errors import ApprovalNotPendingError, ApprovalTokenError

if TYPE_CHECKING:
    from ..runtime.runtime import DurableRuntime

__all__ = [
    "approval_link",
    "check_link_token",
    "link_for",
    "open_request",
    "pending_request",
    "precheck_token",
]

_REFUSED = "approval token missing, invalid, expired, or bound to another run or call"
_NEW_LINK = "ask for a new link (or GET /runs/{run_id}/approvals for a fresh token)"


def link_for(
    signer: ApprovalSigner, run_id: str, request: ToolApprovalRequest, base_url: str
) -> str:
    """The approval link for ``request`` of ``run_id`` under ``base_url`` (the server's URL)."""
    token = signer.sign(request.model_copy(update={"token": None}), run_id=run_id)
    path = f"approve/{quote(run_id, safe='')}/{quote(request.approval_id, safe='')}"
    return f"{base_url.rstrip('/')}/{path}?token={quote(token, safe='')}"


async def pending_request(
    runtime: DurableRuntime, run_id: str, approval_id: str
) -> ToolApprovalRequest | None:
    """The pending request ``approval_id`` of ``run_id`` while it waits for a verdict, else None.

    Raises:
        RunNotFoundError: No such run.
    """
    run = Run(runtime, run_id)
    record = await offload(run.record)
    if record.state == "waiting_approval" and approval_id not in record.verdicts:
        for request in await run.pending_approvals():
            if request.approval_id == approval_id:
                return request
    return None


async def open_request(
    runtime: DurableRuntime, run_id: str, approval_id: str
) -> ToolApprovalRequest:
    """The pending request ``approval_id`` of ``run_id``, while it waits for a verdict.

    Raises:
        RunNotFoundError: No such run.
        ApprovalNotPendingError: The run does not wait for that approval (any
            more); ``verdict`` names the verdict recorded on it, if any.
    """
    request = await pending_request(runtime, run_id, approval_id)
    if request is not None:
        return request
    record = await offload(Run(runtime, run_id).record)
    decided = record.decided.get(approval_id) or record.verdicts.get(approval_id)
    if decided is not None:
        verdict = "approved" if decided.get("approved") else "denied"
        raise ApprovalNotPendingError(run_id, approval_id, verdict=verdict, state=record.state)
    raise ApprovalNotPendingError(
        run_id,
        approval_id,
        state=record.state,
        message=f"run {run_id!r} does not wait for approval {approval_id!r} "
        f"(it is {record.state}): answered already, or never asked",
    )


async def approval_link(
    runtime: DurableRuntime, run_id: str, approval_id: str, base_url: str
) -> str:
    """Mint a link to approve or deny one pending call of a run, for someone outside the notebook.

    ``base_url`` is where the bridge is reachable (``nbdurable serve --public-url``,
    or the URL of the app it is mounted in); the link's page works without the
    bearer token. Example: ``https://host/approve/run-1/approval_1?token=v1....``.

    Raises:
        RunNotFoundError: No such run.
        ApprovalNotPendingError: The run does not wait for that approval.
    """
    request = await open_request(runtime, run_id, approval_id)
    return link_for(runtime.signer, run_id, request, base_url)


def check_link_token(
    signer: ApprovalSigner,
    token: object,
    request: ToolApprovalRequest,
    *,
    run_id: str,
    max_age_ms: int | None,
) -> str:
    """The token when it may answer ``request`` of ``run_id``; else ApprovalTokenError.

    It must verify (MAC), name this approval and this run, pin this call
    (tool, call id, input), and be younger than ``max_age_ms`` when set.

    Raises:
        ApprovalTokenError: A forged, altered, cross-run or cross-call token.
        ApprovalExpiredError: A genuine token ``max_age_ms`` old or older.
    """
    payload = signer.verify(token)
    if (
        not isinstance(token, str)
        or payload is None
        or payload.get("approval_id") != request.approval_id
        or not bound_to_run(payload, run_id)
        or not token_matches(signer, token, request, run_id=run_id, max_age_ms=None)
    ):
        raise ApprovalTokenError(_REFUSED)
    _refuse_expired(
        signer, token, run_id=run_id, approval_id=request.approval_id, max_age_ms=max_age_ms
    )
    return token


def _refuse_expired(
    signer: ApprovalSigner, token: object, *, run_id: str, approval_id: str, max_age_ms: int | None
) -> None:
    age = expired_age(signer, token, max_age_ms)
    if age is not None and max_age_ms is not None:
        raise approval_expired(
            run_id, approval_id, age, max_age_ms, _NEW_LINK.format(run_id=run_id)
        )


def precheck_token(
    signer: ApprovalSigner,
    token: object,
    *,
    run_id: str,
    approval_id: str,
    max_age_ms: int | None,
) -> None:
    """Refuse a token that does not verify or names another run or approval.

    Checked before anything about the run is looked up, so a bad link learns
    nothing; :func:`check_link_token` then checks the pin against the pending call.

    Raises:
        ApprovalTokenError: The token is forged, altered or bound elsewhere.
        ApprovalExpiredError: A genuine token ``max_age_ms`` old or older.
    """
    payload = signer.verify(token)
    if (
        payload is None
        or payload.get("approval_id") != approval_id
        or not bound_to_run(payload, run_id)
    ):
        raise ApprovalTokenError(_REFUSED)
    _refuse_expired(signer, token, run_id=run_id, approval_id=approval_id, max_age_ms=max_age_ms)
