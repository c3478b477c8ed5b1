"""A run's pending approvals and verdicts on them, for authenticated callers."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..durable.offload import offload
from ..durable.signer import resign_if_expired
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
        """The calls the run waits for, with their signed tokens and approval links.

        A token past the max age comes freshly signed (the request still waits).
        """
        run = Run(runtime, run_id)
        record = await offload(run.record)
        base = bridge.base_url(request)
        max_age = bridge.approval_max_age_ms
        return [
            ApprovalOut.of(
                resign_if_expired(runtime.signer, r, max_age),
                link_for(runtime.signer, run_id, r, base),
            )
            for r in await run.pending_approvals()
            if r.approval_id not in record.verdicts
        ]

    @router.post(
        "/runs/{run_id}/approvals/{approval_id}",
        response_model=VerdictOut,
        summary="Approve or deny a pending call",
        responses={
            403: {"model": ErrorBody, "description": "Token forged, altered or bound elsewhere"},
            404: {"model": ErrorBody, "description": "No such run"},
            409: {
                "model": ErrorBody,
                "description": "The approval no longer waits: another verdict won (`verdict`)",
            },
            410: {"model": ErrorBody, "description": "Token past the max age: get a fresh one"},
        },
    )
    async def verdict(run_id: str, approval_id: str, body: VerdictIn) -> VerdictOut:
        """Approve (with the approval's signed token) or deny (token optional) one call.

        The token is verified server-side; a refused verdict changes nothing. One
        verdict per approval wins; the same verdict sent again answers as the
        first time did (200).
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
            run=RunOut.of(await offload(Run(runtime, run_id).record)),
        )

    return router
