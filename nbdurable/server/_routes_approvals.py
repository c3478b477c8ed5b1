"""Approvals for authenticated callers: every run's (the inbox), a run's, and verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from .._errors import ApproverNotAllowedError
from ..durable._offload import offload
from ..durable._signer import request_still_signed, resign_if_expired
from ..durable.store import maybe_await
from ..inspect._approvals import APPROVAL_STATUSES, approval_rows
from ..messages import ToolApprovalRequest, VerdictSource
from ..runs import RuntimeRun
from ..runtime._run import Run
from ._auth import principal_of
from ._context import Bridge
from ._errors import ApprovalTokenError
from ._handlers import error_responses
from ._links import answer, mint_link
from ._schemas import ApprovalOut, InboxApprovalOut, RunOut, VerdictIn, VerdictOut

__all__ = ["approvals_router"]


def approvals_router(bridge: Bridge) -> APIRouter:
    """The ``/runs/{run_id}/approvals`` routes of ``bridge``."""
    router = APIRouter(tags=["approvals"])
    runtime = bridge.runtime

    @router.get(
        "/approvals",
        response_model=list[InboxApprovalOut],
        summary="Approval requests of every run (the inbox)",
        responses=error_responses({404: "No such run (`run_id`)", 422: "An unknown status"}),
    )
    async def inbox(
        request: Request,
        status: Annotated[
            list[str] | None,
            Query(
                description="Only these statuses (repeat it, or comma-separate): "
                f"{', '.join(APPROVAL_STATUSES)} or `all`. Default: pending and expired."
            ),
        ] = None,
        run_id: Annotated[str | None, Query(description="Only this run's requests.")] = None,
    ) -> list[InboxApprovalOut]:
        """The approval requests of every run, oldest first: the pending ones by default.

        A decidable one (pending or expired, of a run waiting for it) comes with
        an approval link signed now, so an expired token is no obstacle, minted
        by the bearer token's principal. A call the agent's ``approvers``
        reserve gets a link only when the principal is one of them (addressed
        to them); a request signed with a retired key gets none.
        """
        names = [n.strip() for value in status or () for n in value.split(",") if n.strip()]
        wanted: Any = names if names else ("pending", "expired")
        if "all" in names:
            wanted = None
        rows = approval_rows(
            runtime.store, run_id=run_id, status=wanted, max_age_ms=bridge.approval_max_age_ms
        )
        base = bridge.base_url(request)
        principal = principal_of(request)
        decidable = {row["run_id"] for row in rows if row["status"] in ("pending", "expired")}
        waiting = await _waiting(runtime, decidable)
        out = []
        for row in rows:
            link = None
            found = waiting.get(row["run_id"])
            pending_request = found.requests.get(row["approval_id"]) if found else None
            if found is not None and pending_request is not None:
                link = _link_or_none(runtime, found.record, pending_request, base, principal)
            out.append(InboxApprovalOut.of(row, link))
        return out

    @router.get(
        "/runs/{run_id}/approvals",
        response_model=list[ApprovalOut],
        summary="Pending approvals of a run",
        responses=error_responses(
            {
                403: "`to` given, and a link to that name may not be minted by this "
                "principal for a call `approvers` reserve (ApproverNotAllowedError)",
                404: "No such run",
            }
        ),
    )
    async def pending(
        run_id: str,
        request: Request,
        to: Annotated[
            str | None,
            Query(max_length=128, description="Address the links to this name"),
        ] = None,
    ) -> list[ApprovalOut]:
        """The calls the run waits for, with their signed tokens and approval links.

        A token past the max age comes freshly signed (the request still waits).
        With ``to``, each link is addressed to that name: its verdict is recorded
        as given via a link addressed to them. Every link records who minted it
        (the bearer token's principal). For a call the agent's ``approvers``
        reserve, only one of them may mint a link, addressed to one of them
        (default: themself): with ``to``, anyone else gets a 403; without,
        their ``link`` is null. A request signed with a retired key gets no
        link (it can only be denied).
        """
        run = Run(runtime, run_id)
        record = await offload(run.record)
        base = bridge.base_url(request)
        max_age = bridge.approval_max_age_ms
        principal = principal_of(request)
        out = []
        for r in await run.pending_approvals():
            if r.approval_id in record.verdicts:
                continue
            if to is not None and request_still_signed(runtime.signer, r):
                # asked for links to a name: a refusal to mint is the answer (403)
                link: str | None = mint_link(
                    runtime.signer, record, r, base, by=principal, via="http", to=to
                )
            else:
                link = _link_or_none(runtime, record, r, base, principal)
            out.append(ApprovalOut.of(resign_if_expired(runtime.signer, r, max_age), link))
        return out

    @router.post(
        "/runs/{run_id}/approvals/{approval_id}",
        response_model=VerdictOut,
        summary="Approve (maybe with edited arguments), deny or reply to a pending call",
        responses=error_responses(
            {
                403: "Token forged, altered or bound elsewhere, or the "
                "principal may not decide the call (ApproverNotAllowedError)",
                404: "No such run",
                409: "The approval no longer waits: another verdict won (`verdict`)",
                410: "Token past the max age: get a fresh one",
                422: "Edited `arguments` for a tool that allows no edits "
                "(EditNotAllowedError), or that do not fit its schema (InvalidEditError); "
                "nothing was recorded",
            }
        ),
    )
    async def verdict(
        run_id: str, approval_id: str, body: VerdictIn, request: Request
    ) -> VerdictOut:
        """Approve (with the approval's signed token) or deny (token optional) one call.

        An approval may carry edited ``arguments`` (the tool must allow edits;
        they are checked against its schema, and the token stays the call's
        own); a denial may carry a ``reply`` instead: the call's result, not an
        error, and the tool does not run.
        The token is verified server-side; a refused verdict changes nothing. One
        verdict per approval wins; the same verdict sent again answers as the
        first time did (200). A named bearer token's principal is recorded as
        the decider (authenticated) and must be allowed by the agent's
        ``approvers`` (else 403).
        """
        principal = principal_of(request)
        source = VerdictSource(by=principal, authenticated=principal is not None, via="http")
        outcome = await answer(
            bridge, run_id, approval_id, body, token_required=False, source=source
        )
        assert outcome.state in ("approved", "denied", "replied")
        return VerdictOut(
            outcome=outcome.state,
            message=outcome.message,
            run=RunOut.of(await offload(Run(runtime, run_id).record)),
        )

    return router


@dataclass(frozen=True)
class _Waiting:
    """A run that waits for verdicts: its record and its pending requests by approval id."""

    record: RuntimeRun
    requests: dict[str, ToolApprovalRequest]


def _read_waiting(runtime: Any, run_ids: set[str]) -> dict[str, tuple[RuntimeRun, Any]]:
    """Those of ``run_ids`` that wait for verdicts, with their checkpoints (on a store thread).

    A plain session's run has no record, and gets no link. An async store's
    checkpoint comes back as the awaitable its ``load`` returned.
    """
    found: dict[str, tuple[RuntimeRun, Any]] = {}
    for run_id in sorted(run_ids):
        record = runtime.runtime_store.rt_get(run_id)
        if record is not None and record.state == "waiting_approval":
            found[run_id] = (record, runtime.store.load(run_id))
    return found


async def _waiting(runtime: Any, run_ids: set[str]) -> dict[str, _Waiting]:
    """The runs of ``run_ids`` that wait for verdicts, with their requests as stored.

    One trip to a store thread for them all; the tokens are as signed then (a
    link is signed anew anyway).
    """
    found: dict[str, _Waiting] = {}
    for run_id, (record, checkpoint) in (await offload(_read_waiting, runtime, run_ids)).items():
        checkpoint = await maybe_await(checkpoint)
        requests = checkpoint.pending_approvals if checkpoint is not None else ()
        found[run_id] = _Waiting(record, {r.approval_id: r for r in requests})
    return found


def _link_or_none(
    runtime: Any,
    record: RuntimeRun,
    request: ToolApprovalRequest,
    base: str,
    principal: str | None,
) -> str | None:
    """The link ``principal`` may mint for ``request`` (addressed as the rule says), else None."""
    try:
        return mint_link(runtime.signer, record, request, base, by=principal, via="http")
    except (ApproverNotAllowedError, ApprovalTokenError):
        return None  # not theirs to mint, or only deniable: listed without a link
