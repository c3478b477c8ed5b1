"""``/metrics``, ``/healthz`` and ``/readyz`` on the bridge: no token, no run content.

Probes and scrapers cannot send a bearer token, so these routes take none; they
answer with metric values, ``ok``, or the kind of failure of a dependency. They
stay out of the OpenAPI schema (they are operations' plumbing, not the API).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter
from fastapi.responses import Response

from ..durable.store import RunStore
from ..health import ReadinessProbe, respond, store_check

if TYPE_CHECKING:
    from ..runtime._runtime import DurableRuntime

__all__ = ["probes_router", "runtime_probe"]


def probes_router(probe: ReadinessProbe) -> APIRouter:
    """The three probe routes, answering from ``probe`` and the process's metrics."""
    router = APIRouter()

    async def answer(path: str) -> Response:
        status, kind, body = await respond(path, probe)
        return Response(content=body, status_code=status, media_type=kind)

    @router.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        return await answer("/healthz")

    @router.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        return await answer("/readyz")

    @router.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return await answer("/metrics")

    return router


def runtime_probe(runtime: DurableRuntime) -> ReadinessProbe:
    """A readiness probe checking that the runtime's store answers."""
    store = runtime.store  # the store itself: the probe makes no retried or mirrored call
    assert isinstance(store, RunStore)  # DurableRuntime takes nothing else
    return ReadinessProbe([("store", store_check(store))])
