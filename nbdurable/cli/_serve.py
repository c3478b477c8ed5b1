"""``nbdurable serve``: the HTTP bridge, with a runtime executing runs on the same loop."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Any

from .._errors import NbdurableError
from ..runtime._limits import DEFAULT_MAX_CONCURRENT_RUNS
from ._agents import load_all
from ._env import read_env
from ._logs import add_log_options, announce, configure_logging
from ._notify_options import add_notify_options, notifier_from_args
from ._probes import add_probe_options, enable_process_metrics, start_probes

__all__ = ["STOP_STORE_SECONDS", "add_parser", "max_age_option", "serve"]

STOP_STORE_SECONDS = 5.0
"""After SIGTERM or SIGINT, how long store calls failing for connection-level reasons
are still retried: uvicorn's 2 s for the requests in flight, then the runtime's
close. A bridge whose store is away exits within about this (not its 60-s budget)."""


def _stop(server: Any, runtime: Any) -> None:
    server.should_exit = True
    runtime.store_retry.give_up_within(STOP_STORE_SECONDS)


def max_age_option(seconds: float | None) -> dict[str, Any]:
    """The runtime option for ``--approval-max-age SECONDS`` (none: the runtime's default)."""
    if seconds is None:
        return {}
    if seconds <= 0:
        from .._errors import ConfigurationError

        raise ConfigurationError(f"--approval-max-age must be positive, not {seconds:g}")
    return {"approval_max_age_ms": max(1, int(seconds * 1000))}


def add_parser(commands: Any) -> None:
    """Add the ``serve`` command to the subcommands ``commands``."""
    parser = commands.add_parser(
        "serve",
        help="the HTTP bridge: runs, SSE event streams and signed approval links",
        description="Serve runs over HTTP (the server extra: pip install nbdurable[server]).",
    )
    parser.add_argument("--store", required=True, help="store URL, e.g. sqlite:///runs.db")
    parser.add_argument(
        "--agents",
        required=True,
        action="append",
        metavar="MODULE:ATTR",
        help="module:attribute holding an Agent or a list of Agents (repeatable)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    parser.add_argument(
        "--token",
        default=None,
        help="bearer token of the API (default: NBDURABLE_SERVER_TOKEN; "
        "required on a non-loopback host)",
    )
    parser.add_argument(
        "--token-file",
        default=None,
        metavar="PATH",
        help="named bearer tokens, one 'name: token' line each (# comments): a verdict "
        "given with one is recorded as by that name, authenticated",
    )
    parser.add_argument("--max-body-bytes", type=int, default=1_048_576, metavar="N")
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection whose request headers have not all come within this "
        "(from its opening, or a later request's first byte; default 10)",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="answer 408 and close a connection whose request body has not all come "
        "this long after its headers (default 30)",
    )
    parser.add_argument("--public-url", default=None, help="base URL of approval links")
    parser.add_argument(
        "--cors-origin", action="append", default=[], metavar="ORIGIN", help="allow CORS from it"
    )
    parser.add_argument(
        "--approval-max-age",
        type=float,
        default=None,
        metavar="SECONDS",
        help="refuse approval tokens older than this (default: 7 days)",
    )
    parser.add_argument("--max-concurrent-runs", type=int, default=DEFAULT_MAX_CONCURRENT_RUNS)
    parser.add_argument("--poll-interval", type=float, default=0.05)
    add_notify_options(parser, public_url=False)  # links use --public-url
    add_log_options(parser, level="warning")
    add_probe_options(
        parser,
        port_help="serve /metrics, /healthz and /readyz on this port instead of the API's",
    )
    parser.set_defaults(handler=lambda args: asyncio.run(serve(args)))
    read_env(parser)  # last: every flag above can come from NBDURABLE_<FLAG>


async def serve(args: argparse.Namespace) -> int:
    """Serve until SIGINT or SIGTERM; in-flight steps are abandoned cleanly on the way out."""
    from .._extras import require

    require("server", "nbdurable serve")
    from ..runtime._runtime import DurableRuntime
    from ..server._principals import read_token_file
    from ..server._serving import bound_url, build_server
    from ..stores import missing_path, open_store

    log_format = getattr(args, "log_format", "text")
    configure_logging(args.log_level, log_format, also=("uvicorn",))
    agents = load_all(args.agents)
    notifier = notifier_from_args(args)
    tokens = read_token_file(args.token_file) if args.token_file else None
    new = " (a new store, created now)" if missing_path(args.store) is not None else ""
    store = open_store(args.store)
    probes = None
    try:
        try:
            enable_process_metrics(args, store)
        except NbdurableError as exc:  # prometheus-client missing: /metrics stays empty
            logging.getLogger("nbdurable").warning("nbdurable serve: %s", exc)
        probes = await start_probes(args, store)
        runtime = await DurableRuntime.open(
            store=store,
            agents=agents,
            max_concurrent_runs=args.max_concurrent_runs,
            poll_interval=args.poll_interval,
            notify=notifier,
            **max_age_option(args.approval_max_age),
        )
        try:
            server = build_server(
                runtime,
                host=args.host,
                port=args.port,
                token=args.token,
                tokens=tokens,
                max_body_bytes=args.max_body_bytes,
                header_timeout_s=args.header_timeout,
                body_timeout_s=args.body_timeout,
                cors_origins=args.cors_origin,
                public_url=args.public_url,
                approval_max_age_ms=runtime.approval_max_age_ms,
                log_level=args.log_level,
                log_format=log_format,
                uvicorn_log_config=False,  # its loggers write through configure_logging's
                probe_routes=probes is None,
            )
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, _stop, server, runtime)
            task = asyncio.ensure_future(server.serve())
            while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn has no event)
                await asyncio.sleep(0.01)
            if server.started:
                url = bound_url(server)
                announce(
                    f"nbdurable serve: {url} serving {len(agents)} agent(s) from {args.store}{new}",
                    url=url,
                )
            await task
            return 0 if server.started else 2
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                # A loop left holding them fails to reset them from the thread that
                # collects it.
                asyncio.get_running_loop().remove_signal_handler(signum)
            await runtime.close()
    finally:
        if probes is not None:
            await probes.close()
        store.close()
