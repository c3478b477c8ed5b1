"""A run's pending approvals and verdicts on them, for authenticated callers."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from ..durable.signer import resign_if_expired
from ..messages import VerdictSource
from ..runtime.run import Run
from .auth import principal_of
from .context import Bridge
from .handlers import ErrorBody
from .links import link_for
from .schemas import ApprovalOut, RunOut, VerdictIn, VerdictOut
from .verdicts import answer

__all__ = ["approvals_router"]


def approvals_router(bridge: Bridge) -> APIRouter:
    """The ``/runs/{run_id}/approvals`` routes of ``bridge``."""
    router = APIRouter(tags=["approvals"])
    runtime = bridge.runtime

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
        record = run.record()
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
            run=RunOut.of(Run(runtime, run_id).record()),
        )

    return router
