"""``--metrics-port``: the ``/metrics``, ``/healthz`` and ``/readyz`` routes of a CLI process."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..durable.store import RunStore

if TYPE_CHECKING:
    from ..durable.store import HistoryStore

__all__ = ["Probes", "add_probe_options", "enable_process_metrics", "start_probes"]


def add_probe_options(parser: Any, *, port_help: str | None = None) -> None:
    """Add ``--metrics-port``, ``--metrics-host`` and ``--no-store-gauges``."""
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help=port_help
        or "serve /metrics, /healthz and /readyz on this port (0: any free port; "
        "needs nbdurable[metrics])",
    )
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="address of --metrics-port (default loopback)"
    )
    parser.add_argument(
        "--no-store-gauges",
        action="store_true",
        help="leave out the store-wide gauges (counted from the store at each scrape)",
    )


def enable_process_metrics(args: argparse.Namespace, store: HistoryStore) -> None:
    """Turn on this process's metrics (with the store-wide gauges unless told not to)."""
    from ..metrics import enable_metrics, store_label

    enable_metrics(
        None if getattr(args, "no_store_gauges", False) else store,
        store_name=store_label(args.store),
    )


class Probes:
    """The probe server of a CLI process, and its readiness checks."""

    def __init__(self, server: Any, probe: Any) -> None:
        self.server = server
        self.probe = probe

    async def close(self) -> None:
        """Stop the probe server."""
        self.server.close()


async def start_probes(args: argparse.Namespace, store: HistoryStore) -> Probes | None:
    """Start the probe server when ``--metrics-port`` is given (else None)."""
    port = getattr(args, "metrics_port", None)
    if port is None:
        return None
    from .. import metrics
    from ..health import ReadinessProbe, start_probe_server, store_check

    if metrics.HOOKS is None:
        enable_process_metrics(args, store)
    # The CLI's runtime refuses a store without run records, so this one has them.
    assert isinstance(store, RunStore)
    probe = ReadinessProbe([("store", store_check(store))])
    server = start_probe_server(probe, host=args.metrics_host, port=port)
    host = args.metrics_host
    shown = f"[{host}]" if ":" in host else host
    from ._logs import announce

    url = f"http://{shown}:{server.port}"
    announce(f"nbdurable metrics: {url}/metrics", url=url)
    return Probes(server, probe)
