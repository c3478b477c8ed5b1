"""``create_app``: the HTTP bridge as an ASGI app, standalone or mounted in another app."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware

from .._errors import ConfigurationError
from ._agui_routes import agui_router
from ._approval_page import approval_page_router
from ._auth import bearer_guard, resolve_token
from ._body_limit import DEFAULT_BODY_TIMEOUT_S, BodyLimit, positive_seconds
from ._context import Bridge
from ._handlers import ERROR_RESPONSES, install_error_handlers
from ._openapi import truthful_openapi
from ._probes import probes_router, runtime_probe
from ._routes_approvals import approvals_router
from ._routes_events import events_router
from ._routes_runs import runs_router

if TYPE_CHECKING:
    from ..runtime._runtime import DurableRuntime

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app"]

DEFAULT_MAX_BODY_BYTES = 1_048_576

_DESCRIPTION = """\
Runs of a `DurableRuntime` over HTTP: submit, watch (Server-Sent Events with
`Last-Event-ID` reconnect), cancel, retry, and answer approvals with their
signed tokens, also as the AG-UI protocol (`/agui/...`: its events, and the
answers to its interrupts; the `ag-ui` extra). Every route but the approval links needs
`Authorization: Bearer <token>`; an approval link is bound to one call by its
own signed token. Errors are `{"error": {"type": ..., "message": ...}}`.
"""


def create_app(
    runtime: DurableRuntime,
    *,
    token: str | None = None,
    tokens: Mapping[str, str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout_s: float | None = DEFAULT_BODY_TIMEOUT_S,
    cors_origins: Sequence[str] = (),
    public_url: str | None = None,
    approval_max_age_ms: int | None = None,
    probe_routes: bool = True,
) -> FastAPI:
    """The HTTP bridge of ``runtime``: an ASGI app (mount it inside another one if you like).

    Open the runtime on the loop that serves the app to execute runs there
    (``nbdurable serve`` does), or hand it a client runtime whose runs
    ``nbdurable worker`` processes execute.

    Args:
        runtime: The runtime whose runs the bridge serves.
        token: The bearer token every API route needs; default
            ``NBDURABLE_SERVER_TOKEN``. Without one, the API answers loopback
            clients only.
        tokens: Named principals' bearer tokens, by name (``nbdurable serve
            --token-file``): a verdict given with one is recorded as by that
            name, authenticated, and checked against ``Agent(approvers=...)``.
        max_body_bytes: Larger request bodies are refused with 413 before parsing.
        body_timeout_s: A request body not all received this many seconds after
            its headers is refused with 408 and its connection closed (None: no
            bound; the time to send the headers is bounded by the server, see
            :func:`nbdurable.server.build_server`'s ``header_timeout_s``).
        cors_origins: Origins allowed cross-origin (CORS is off by default).
        public_url: Base URL of approval links (default: the URL a request came to).
        approval_max_age_ms: Approval tokens this old or older are refused
            (links count from when they were minted). Default: the runtime's
            ``approval_max_age_ms`` (7 days unless set).
        probe_routes: Serve ``/metrics``, ``/healthz`` and ``/readyz`` (no token;
            see docs/observability.md).

    Raises:
        ConfigurationError: An invalid option.
    """
    if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int):
        raise ConfigurationError(f"max_body_bytes must be an integer, not {max_body_bytes!r}")
    if max_body_bytes < 1:
        raise ConfigurationError(f"max_body_bytes must be positive, not {max_body_bytes}")
    if body_timeout_s is not None:
        body_timeout_s = positive_seconds("body_timeout_s", body_timeout_s)
    if approval_max_age_ms is not None and approval_max_age_ms <= 0:
        raise ConfigurationError("approval_max_age_ms must be positive or None")
    if isinstance(cors_origins, str):
        raise ConfigurationError("cors_origins is a list of origins, not one string")
    bridge = Bridge(
        runtime=runtime,
        public_url=public_url.rstrip("/") if public_url else None,
        approval_max_age_ms=(
            runtime.approval_max_age_ms if approval_max_age_ms is None else approval_max_age_ms
        ),
    )
    guard = Depends(bearer_guard(resolve_token(token), tokens))
    app = FastAPI(
        title="nbdurable HTTP bridge",
        description=_DESCRIPTION,
        version=_version(),
        responses=None,
    )
    install_error_handlers(app)
    routers = (runs_router(bridge), events_router(bridge), approvals_router(bridge))
    for router in (*routers, agui_router(bridge)):  # AG-UI: 501 without the ag-ui extra
        app.include_router(router, dependencies=[guard], responses=ERROR_RESPONSES)
    app.include_router(approval_page_router(bridge), responses={422: ERROR_RESPONSES[422]})
    if probe_routes:
        app.include_router(probes_router(runtime_probe(runtime)))
    app.openapi = truthful_openapi(app)  # type: ignore[method-assign]
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
        )
    # Added last, so outermost: every request's body is bounded in size and time,
    # a CORS preflight's too (CORS answers one without reading its body).
    app.add_middleware(BodyLimit, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s)
    app.state.bridge = bridge
    return app


def _version() -> str:
    from .._version import __version__

    return str(__version__)
