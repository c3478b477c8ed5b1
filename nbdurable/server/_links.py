"""Approval links: a URL for one pending approval, carrying a signed token bound to it.

Minting needs no web framework: a notebook prints a link for a server that runs
elsewhere (with the same store and approval secret). The token in a link is
signed freshly by the runtime's signer for the run and the pinned call, so a
``max_age`` counts from when the link was made; it approves or denies that one
call once, and nothing else.

Who may mint one is the run's rule (:func:`~nbdurable.runs.check_minter`):
for a call its approvers reserve, only one of them, addressed to one of them.
Every link records who minted it and how, signed into its token, and its
verdict records that too. No link is minted for a request whose own token no
longer verifies (signed with a retired key): it can only be denied.

Every verdict that arrives over HTTP, by link or through the API, takes one path
(:func:`answer`): its token checked here, then
:func:`~nbdurable.runtime._checked_verdicts.submit_verdict`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from .._errors import ApprovalExpiredError, DurableConflictError
from ..durable._offload import offload
from ..durable._signer import (
    ApprovalSigner,
    bound_to_run,
    expired_age,
    link_claims,
    link_token,
    request_still_signed,
    token_matches,
)
from ..messages import ToolApprovalRequest, VerdictSource
from ..runs import RuntimeRun, check_minter, claimed_user, valid_name
from ..runtime._checked_verdicts import Outcome, submit_verdict
from ..runtime._run import Run, approval_expired
from ._errors import ApprovalNotPendingError, ApprovalTokenError

if TYPE_CHECKING:
    from ..runtime._runtime import DurableRuntime
    from ._context import Bridge  # starlette: only the bridge itself imports it

__all__ = [
    "Given",
    "VerdictError",
    "answer",
    "addressed_to",
    "approval_link",
    "check_link_token",
    "link_for",
    "link_source",
    "mint_link",
    "open_request",
    "pending_request",
    "precheck_token",
]

_REFUSED = "approval token missing, invalid, expired, or bound to another run or call"
_NEW_LINK = "ask for a new link (or GET /runs/{run_id}/approvals for a fresh token)"


def link_for(
    signer: ApprovalSigner,
    run_id: str,
    request: ToolApprovalRequest,
    base_url: str,
    *,
    to: str | None = None,
    minted_by: str | None = None,
    minted_via: str | None = None,
) -> str:
    """The approval link for ``request`` of ``run_id`` under ``base_url`` (the server's URL).

    ``to`` (whom the link is for) is signed into its token: the verdict it gives
    is recorded as "via link addressed to" that name, and counts as theirs where
    ``Agent(approvers=...)`` names who may decide. A link is a bearer
    credential: it proves no identity, only that it was handed to someone.
    ``minted_by`` / ``minted_via`` (who minted it, how) are signed in too.
    This checks nothing about who may mint: :func:`mint_link` does, and a link
    minted without it decides no call its approvers reserve.
    """
    if to is not None:
        to = valid_name(to, "a link's addressee")
    token = link_token(signer, request, run_id, to=to, minted_by=minted_by, minted_via=minted_via)
    path = f"approve/{quote(run_id, safe='')}/{quote(request.approval_id, safe='')}"
    return f"{base_url.rstrip('/')}/{path}?token={quote(token, safe='')}"


def mint_link(
    signer: ApprovalSigner,
    record: RuntimeRun,
    request: ToolApprovalRequest,
    base_url: str,
    *,
    by: str | None,
    via: str,
    to: str | None = None,
) -> str:
    """The link for pending ``request`` of ``record``'s run, when ``by`` may mint it.

    Args:
        signer: The runtime's signer.
        record: The run's record (whose approvers decide who may mint).
        request: The pending request (as ``Run.pending_approvals`` gives it).
        base_url: Where the bridge is reachable.
        by: Who mints: a named token's principal (``via="http"``), a claimed
            name (``via="api"``), or None (the unnamed token).
        via: ``http`` or ``api`` (the notifier mints for itself).
        to: Whom to address it to (a reserved call: default ``by``).

    Raises:
        ApproverNotAllowedError: ``by`` (or ``to``) is not an approver of a
            call its approvers reserve (HTTP 403); nothing was minted.
        ApprovalTokenError: The request's own token no longer verifies (a key
            since retired signed it): it can only be denied.
        ConfigurationError: A blank ``to``.
    """
    if not request_still_signed(signer, request):
        raise ApprovalTokenError(
            f"approval {request.approval_id!r} of run {record.run_id!r} was signed with a key "
            "that is no longer trusted (retired), or not signed: no link is minted for it; "
            "it can only be denied (or the run forked)"
        )
    to = check_minter(record, request.approval_id, request.tool_name, minted_by=by, via=via, to=to)
    return link_for(signer, record.run_id, request, base_url, to=to, minted_by=by, minted_via=via)


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
        verdict = "approved" if decided.approved else "denied"
        raise ApprovalNotPendingError(run_id, approval_id, verdict=verdict, state=record.state)
    raise ApprovalNotPendingError(
        run_id,
        approval_id,
        state=record.state,
        message=f"run {run_id!r} does not wait for approval {approval_id!r} "
        f"(it is {record.state}): answered already, or never asked",
    )


async def approval_link(
    runtime: DurableRuntime,
    run_id: str,
    approval_id: str,
    base_url: str,
    *,
    to: str | None = None,
    by: str | None = None,
) -> str:
    """Mint a link to approve or deny one pending call of a run, for someone outside the notebook.

    ``base_url`` is where the bridge is reachable (``nbdurable serve --public-url``,
    or the URL of the app it is mounted in); the link's page works without the
    bearer token. Example: ``https://host/approve/run-1/approval_1?token=v1....``.
    ``to`` names whom the link is addressed to (see :func:`link_for`). ``by``
    is who mints it, recorded as claimed (default: ``NBDURABLE_USER``, else the
    OS user): for a call ``Agent(approvers=...)`` reserves, it must be one of
    them, and so must ``to`` (default: ``by``).

    Raises:
        RunNotFoundError: No such run.
        ApprovalNotPendingError: The run does not wait for that approval.
        ApproverNotAllowedError: ``by`` or ``to`` is not an approver of a
            reserved call; nothing was minted.
        ApprovalTokenError: The request was signed with a key since retired.
        ConfigurationError: A blank ``to``.
    """
    request = await open_request(runtime, run_id, approval_id)
    record = await offload(Run(runtime, run_id).record)
    minter = valid_name(by, "a link's minter") if by is not None else claimed_user()
    return mint_link(runtime.signer, record, request, base_url, by=minter, via="api", to=to)


def addressed_to(signer: ApprovalSigner, token: object) -> str | None:
    """Whom a verified link token was addressed to (None: nobody named, or not verified)."""
    return link_claims(signer, token)["to"]


def link_source(signer: ApprovalSigner, token: object) -> VerdictSource:
    """The source a link's verdict records: whom it was addressed to, who minted it and how."""
    claims = link_claims(signer, token)
    return VerdictSource(
        via="link",
        addressed_to=claims["to"],
        minted_by=claims["minted_by"],
        minted_via=claims["minted_via"],
    )


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


class VerdictError(DurableConflictError):
    """The verdict could not be recorded; the run is left as it was."""


class Given(Protocol):
    """A verdict as a client sent it: an HTTP body, an AG-UI resume entry."""

    @property
    def approve(self) -> bool: ...
    @property
    def token(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def arguments(self) -> dict[str, Any] | None: ...
    @property
    def reply(self) -> str | None: ...


async def answer(
    bridge: Bridge,
    run_id: str,
    approval_id: str,
    given: Given,
    *,
    token_required: bool,
    source: VerdictSource | None = None,
) -> Outcome:
    """Record the verdict ``given``, or raise a typed error and change nothing.

    While the request is pending, the token (needed to approve, and for any
    verdict when ``token_required``, as on an approval link) must verify with
    the runtime's signer, be younger than the bridge's max age, and name this
    run, this approval and this call. ``submit_verdict`` then checks it again
    and the store's conditional write records it, unless another verdict won
    meanwhile. The same verdict sent again (a client retrying after a timeout)
    answers as the first time did. ``source`` (who decides, and how) is
    recorded with it, once the run's rule on who may decide allows it. An
    approval may carry edited ``arguments`` (checked like the runtime's, the
    token still the call's own); a denial may carry a ``reply`` instead of a
    reason (the call's result, not an error).

    Raises:
        EditNotAllowedError: ``arguments`` for a tool that allows no edits (422).
        InvalidEditError: ``arguments`` that do not fit the tool's schema (422).
        RunNotFoundError: No such run.
        ApprovalNotPendingError: Another verdict won (``verdict`` names it), or
            the run does not wait for this approval.
        ApprovalTokenError: The token is forged, altered or bound elsewhere.
        ApprovalExpiredError: A genuine token past the max age: ask for a new link.
        ApproverNotAllowedError: ``source`` may not decide this call (403).
        VerdictError: The runtime refused the verdict.
    """
    runtime = bridge.runtime
    max_age = bridge.approval_max_age_ms
    approve, token = given.approve, given.token
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
        reason=given.reason,
        max_age_ms=max_age,
        source=source,
        arguments=given.arguments,
        reply=given.reply,
    )
    if outcome.refusal is not None:
        raise outcome.refusal
    if outcome.edit_refusal is not None:
        raise outcome.edit_refusal
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
