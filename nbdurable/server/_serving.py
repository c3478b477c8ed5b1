"""Serving the bridge with uvicorn on the running loop, beside the runtime."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import uvicorn

from .._errors import ConfigurationError
from .._redact import RedactSecrets
from ._app import DEFAULT_MAX_BODY_BYTES, create_app
from ._auth import TOKEN_ENV_VAR, is_loopback, resolve_token
from ._body_limit import DEFAULT_BODY_TIMEOUT_S
from ._read_deadlines import DEFAULT_HEADER_TIMEOUT_S, h11_with_header_deadline

if TYPE_CHECKING:
    from ..runtime._runtime import DurableRuntime

__all__ = ["BridgeServer", "bound_url", "build_server", "mask_uvicorn_logs", "serve"]


class BridgeServer(uvicorn.Server):
    """A uvicorn server that leaves signals to its owner.

    uvicorn re-raises a captured SIGTERM after shutting down, which would end the
    process before the runtime is closed; ``nbdurable serve`` handles the signals
    itself (``should_exit``) and closes the runtime cleanly.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Capture nothing."""
        yield


def build_server(
    runtime: DurableRuntime,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    tokens: Mapping[str, str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout_s: float | None = DEFAULT_BODY_TIMEOUT_S,
    cors_origins: Sequence[str] = (),
    public_url: str | None = None,
    approval_max_age_ms: int | None = None,
    log_level: str = "warning",
    log_format: str = "text",
    uvicorn_log_config: bool | None = None,
    probe_routes: bool = True,
) -> BridgeServer:
    """A uvicorn server for the bridge of ``runtime`` (``await server.serve()`` runs it).

    It installs no signal handlers: set ``server.should_exit = True`` to stop it.
    A client has ``header_timeout_s`` to send a request's headers (from the
    connection's opening, or from its first byte on a kept-alive connection) and
    ``body_timeout_s`` more for its body; past either its connection is closed
    (with a 408), so slow clients hold no connection longer than that
    (:mod:`nbdurable.server._read_deadlines`).
    ``uvicorn_log_config`` says whether uvicorn installs its own log handlers
    (default: with ``log_format="text"``); without them its loggers' records go
    to the caller's handlers (``nbdurable serve`` writes every line through
    one handler of the root logger). Either way the query tokens of approval
    links, bearer tokens and URL passwords are masked in uvicorn's log records
    (:class:`nbdurable._redact.RedactSecrets` on ``uvicorn.access`` and
    ``uvicorn.error``).

    Raises:
        ConfigurationError: No token is configured and ``host`` is not loopback.
    """
    token = resolve_token(token)
    if token is None and not tokens and not is_loopback(host):
        raise ConfigurationError(
            f"refusing to listen on {host} without a token: pass --token or "
            f"--token-file, or set {TOKEN_ENV_VAR}"
        )
    app = create_app(
        runtime,
        token=token,
        tokens=tokens,
        max_body_bytes=max_body_bytes,
        body_timeout_s=body_timeout_s,
        cors_origins=cors_origins,
        public_url=public_url,
        approval_max_age_ms=approval_max_age_ms,
        probe_routes=probe_routes,
    )
    if uvicorn_log_config is None:
        uvicorn_log_config = log_format == "text"
    logging_config: dict[str, Any] = {} if uvicorn_log_config else {"log_config": None}
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        http=h11_with_header_deadline(header_timeout_s),
        lifespan="off",
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=2,
        **logging_config,
    )
    mask_uvicorn_logs()
    return BridgeServer(config)


def mask_uvicorn_logs() -> None:
    """Mask secrets in every record logged to uvicorn's loggers (once per process).

    A filter on a logger sees the records logged to that logger by name, before
    any handler: uvicorn's own handlers and the caller's write them masked.
    """
    for name in ("uvicorn.access", "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(known, RedactSecrets) for known in logger.filters):
            logger.addFilter(RedactSecrets())


def bound_url(server: uvicorn.Server) -> str:
    """``http://host:port`` the started ``server`` listens on (the real port when port 0)."""
    for listener in server.servers:
        for sock in listener.sockets:
            host, port = sock.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            return f"http://{shown}:{port}"
    raise ConfigurationError("the server is not listening")


async def serve(runtime: DurableRuntime, *, ready: Any = None, **options: Any) -> None:
    """Serve the bridge of ``runtime`` on the running loop until the server is told to exit.

    ``options`` are those of :func:`build_server`; ``ready(url)`` is called once
    it listens.
    """
    server = build_server(runtime, **options)
    task = asyncio.ensure_future(server.serve())
    while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn has no event)
        await asyncio.sleep(0.01)
    if server.started and ready is not None:
        ready(bound_url(server))
    await task
