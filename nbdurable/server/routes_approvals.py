"""Approvals for authenticated callers: every run's (the inbox), a run's, and verdicts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from ..durable.offload import offload
from ..durable.signer import resign_if_expired
from ..inspect._approvals import APPROVAL_STATUSES, approval_rows
from ..messages import ToolApprovalRequest, VerdictSource
from ..runtime.run import Run
from .auth import principal_of
from .context import Bridge
from .handlers import ErrorBody
from .links import link_for
from .schemas import ApprovalOut, InboxApprovalOut, RunOut, VerdictIn, VerdictOut
from .verdicts import answer

__all__ = ["approvals_router"]


def approvals_router(bridge: Bridge) -> APIRouter:
    """The ``/runs/{run_id}/approvals`` routes of ``bridge``."""
    router = APIRouter(tags=["approvals"])
    runtime = bridge.runtime

    @router.get(
        "/approvals",
        response_model=list[InboxApprovalOut],
        summary="Approval requests of every run (the inbox)",
        responses={
            404: {"model": ErrorBody, "description": "No such run (`run_id`)"},
            422: {"model": ErrorBody, "description": "An unknown status"},
        },
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
        an approval link signed now, so an expired token is no obstacle.
        """
        names = [n.strip() for value in status or () for n in value.split(",") if n.strip()]
        wanted: Any = names if names else ("pending", "expired")
        if "all" in names:
            wanted = None
        rows = approval_rows(
            runtime.store, run_id=run_id, status=wanted, max_age_ms=bridge.approval_max_age_ms
        )
        base = bridge.base_url(request)
        waiting: dict[str, bool] = {}
        out = []
        for row in rows:
            link = None
            if row["status"] in ("pending", "expired") and _decidable(runtime, row, waiting):
                link = link_for(runtime.signer, row["run_id"], _request(row), base)
            out.append(InboxApprovalOut.of(row, link))
        return out

    @router.get(
        "/runs/{run_id}/approvals",
        response_model=list[ApprovalOut],
        summary="Pending approvals of a run",
        responses={404: {"model": ErrorBody, "description": "No such run"}},
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
        as given via a link addressed to them.
        """
        run = Run(runtime, run_id)
        record = await offload(run.record)
        base = bridge.base_url(request)
        max_age = bridge.approval_max_age_ms
        return [
            ApprovalOut.of(
                resign_if_expired(runtime.signer, r, max_age),
                link_for(runtime.signer, run_id, r, base, to=to),
            )
            for r in await run.pending_approvals()
            if r.approval_id not in record.verdicts
        ]

    @router.post(
        "/runs/{run_id}/approvals/{approval_id}",
        response_model=VerdictOut,
        summary="Approve or deny a pending call",
        responses={
            403: {
                "model": ErrorBody,
                "description": "Token forged, altered or bound elsewhere, or the "
                "principal may not decide the call (ApproverNotAllowedError)",
            },
            404: {"model": ErrorBody, "description": "No such run"},
            409: {
                "model": ErrorBody,
                "description": "The approval no longer waits: another verdict won (`verdict`)",
            },
            410: {"model": ErrorBody, "description": "Token past the max age: get a fresh one"},
        },
    )
    async def verdict(
        run_id: str, approval_id: str, body: VerdictIn, request: Request
    ) -> VerdictOut:
        """Approve (with the approval's signed token) or deny (token optional) one call.

        The token is verified server-side; a refused verdict changes nothing. One
        verdict per approval wins; the same verdict sent again answers as the
        first time did (200). A named bearer token's principal is recorded as
        the decider (authenticated) and must be allowed by the agent's
        ``approvers`` (else 403).
        """
        principal = principal_of(request)
        source = VerdictSource(by=principal, authenticated=principal is not None, via="http")
        outcome = await answer(
            bridge,
            run_id,
            approval_id,
            approve=body.approve,
            token=body.token,
            reason=body.reason,
            token_required=False,
            source=source,
        )
        assert outcome.state in ("approved", "denied")
        return VerdictOut(
            outcome=outcome.state,
            message=outcome.message,
            run=RunOut.of(await offload(Run(runtime, run_id).record)),
        )

    return router


def _decidable(runtime: Any, row: dict[str, Any], waiting: dict[str, bool]) -> bool:
    """Whether the runtime's run waits for verdicts (a plain session's run has no record)."""
    run_id = row["run_id"]
    if run_id not in waiting:
        record = runtime.runtime_store.rt_get(run_id)
        waiting[run_id] = record is not None and record.state == "waiting_approval"
    return waiting[run_id]


def _request(row: dict[str, Any]) -> ToolApprovalRequest:
    """The pending call a row describes, as a link pins it."""
    return ToolApprovalRequest(
        approval_id=row["approval_id"],
        tool_call_id=row["tool_call_id"],
        tool_name=row["tool"],
        input=row["arguments"],
        agent_path=row["agent_path"],
    )
