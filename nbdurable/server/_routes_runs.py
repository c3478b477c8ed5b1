"""Runs over HTTP: submit, get, list, cancel, retry."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request

from .._errors import LateResultUndecidedError
from ..durable._offload import offload
from ..runs import RETRYABLE_STATES, RunState, RuntimeRun
from ..runtime._late_results import blind_retry_error
from ..runtime._run import Run
from ..tracing import incoming_trace_context
from ._auth import principal_of
from ._context import Bridge
from ._errors import RunStateError
from ._handlers import error_responses
from ._schemas import RunList, RunOut, SubmitIn

__all__ = ["runs_router"]

_NOT_FOUND = error_responses({404: "No such run"})
_CONFLICT = error_responses({409: "Conflicts with the run's state"})


def runs_router(bridge: Bridge) -> APIRouter:
    """The ``/runs`` routes of ``bridge``."""
    router = APIRouter(tags=["runs"])
    runtime = bridge.runtime

    async def record(run_id: str) -> RuntimeRun:
        return await offload(Run(runtime, run_id).record)

    @router.post(
        "/runs",
        status_code=201,
        response_model=RunOut,
        summary="Submit a run",
        responses=error_responses(
            {409: "Conflicts with the run's state", 429: "Too many unfinished runs"}
        ),
    )
    async def submit(
        body: SubmitIn,
        request: Request,
        traceparent: Annotated[
            str | None, Header(description="W3C trace context: the run's parent span")
        ] = None,
        tracestate: Annotated[str | None, Header(description="W3C trace state")] = None,
    ) -> RunOut:
        """Submit a run of a registered agent; the run is returned at once.

        An equivalent prompt under a used ``request_id`` returns the original run;
        a busy session without ``enqueue`` is a conflict. A ``traceparent`` header
        makes the caller's span the parent of the run's spans. A named bearer
        token's principal is recorded as the run's ``submitted_by``.
        """
        with incoming_trace_context(traceparent, tracestate):
            run = await runtime.submit(
                body.agent,
                body.prompt,
                session_id=body.session_id,
                request_id=body.request_id,
                enqueue=body.enqueue,
                timeout=body.timeout,
                max_steps=body.max_steps,
                submitted_by=principal_of(request),
            )
        return RunOut.of(await offload(run.record))

    @router.get("/runs", response_model=RunList, summary="List runs")
    async def list_runs(
        state: Annotated[RunState | None, Query(description="Only runs in this state")] = None,
        agent: Annotated[str | None, Query(description="Only runs of this agent")] = None,
        limit: Annotated[int, Query(ge=1, le=1000, description="At most this many")] = 100,
    ) -> RunList:
        """Runs, newest first, optionally filtered by state and agent."""
        records = await offload(runtime.list_runs, state)
        if agent is not None:
            records = [r for r in records if r.agent_id == agent]
        return RunList(runs=[RunOut.of(r) for r in reversed(records[-limit:])])

    @router.get("/runs/{run_id}", response_model=RunOut, summary="Get a run", responses=_NOT_FOUND)
    async def get_run(run_id: str) -> RunOut:
        """One run's record."""
        return RunOut.of(await record(run_id))

    @router.post(
        "/runs/{run_id}/cancel", response_model=RunOut, summary="Cancel a run", responses=_NOT_FOUND
    )
    async def cancel(run_id: str) -> RunOut:
        """Cancel the run: at once when it is not executing, else once it settles.

        A finished run is left as it is.
        """
        run = Run(runtime, run_id)
        await run.cancel()
        return RunOut.of(await offload(run.record))

    @router.post(
        "/runs/{run_id}/retry",
        response_model=RunOut,
        summary="Retry a failed or needs_attention run",
        responses={**_NOT_FOUND, **_CONFLICT},
    )
    async def retry(
        run_id: str,
        rerun: Annotated[bool, Query(description="run a call with a late result again")] = False,
        use_late_result: Annotated[
            bool, Query(description="settle the interrupted call with its late result")
        ] = False,
    ) -> RunOut:
        """Let a failed or needs_attention run go on (a fresh model attempt budget).

        An interrupted call that already ran on a worker that had lost the run
        (its ``late_results``) is not run again blind: 409 unless ``rerun=true``
        (run it again anyway) or ``use_late_result=true`` (settle the call with
        that result; the tool does not run again).
        """
        run = Run(runtime, run_id)
        state = (await offload(run.record)).state
        if state not in RETRYABLE_STATES:
            raise RunStateError(f"only failed or needs_attention runs retry, not {state}")
        if use_late_result:
            await run.use_late_result()
            return RunOut.of(await offload(run.record))
        try:
            await run.retry(rerun=rerun)
        except LateResultUndecidedError as refused:  # 409, said in HTTP's words
            use = f"POST /runs/{run_id}/retry?use_late_result=true"
            again = f"POST /runs/{run_id}/retry?rerun=true"
            said = blind_retry_error(run_id, refused.late, use=use, rerun=again)
            raise RunStateError(str(said)) from None
        return RunOut.of(await offload(run.record))

    return router
