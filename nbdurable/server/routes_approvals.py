"""A run's pending approvals and verdicts on them, for authenticated callers."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..runtime.run import Run
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
    async def pending(run_id: str, request: Request) -> list[ApprovalOut]:
        """The calls the run waits for, with their signed tokens and approval links."""
        run = Run(runtime, run_id)
        record = run.record()
        base = bridge.base_url(request)
        return [
            ApprovalOut.of(r, link_for(runtime.signer, run_id, r, base))
            for r in await run.pending_approvals()
            if r.approval_id not in record.verdicts
        ]

    @router.post(
        "/runs/{run_id}/approvals/{approval_id}",
        response_model=VerdictOut,
        summary="Approve or deny a pending call",
        responses={
            403: {"model": ErrorBody, "description": "Token forged, expired or bound elsewhere"},
            404: {"model": ErrorBody, "description": "No such run"},
            409: {"model": ErrorBody, "description": "The approval no longer waits"},
        },
    )
    async def verdict(run_id: str, approval_id: str, body: VerdictIn) -> VerdictOut:
        """Approve (with the approval's signed token) or deny (token optional) one call.

        The token is verified server-side; a refused verdict changes nothing.
        """
        outcome = await answer(
            bridge,
            run_id,
            approval_id,
            approve=body.approve,
            token=body.token,
            reason=body.reason,
            token_required=False,
        )
        assert outcome.state in ("approved", "denied")
        return VerdictOut(
            outcome=outcome.state,
            message=outcome.message,
            run=RunOut.of(Run(runtime, run_id).record()),
        )

    return router
