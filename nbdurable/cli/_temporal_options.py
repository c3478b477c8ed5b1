"""``--tls-ca``, ``--tls-cert``, ``--tls-key``, ``--tls-server-name`` and ``--api-key``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..temporal._connection import TemporalConnection

__all__ = ["add_connection_options", "connection_from_args"]


def add_connection_options(parser: Any) -> None:
    """Add the options securing the connection to a Temporal cluster or Temporal Cloud."""
    parser.add_argument("--tls-ca", metavar="PEM", help="CA of the Temporal server (turns TLS on)")
    parser.add_argument("--tls-cert", metavar="PEM", help="client certificate (mutual TLS)")
    parser.add_argument("--tls-key", metavar="PEM", help="client private key (mutual TLS)")
    parser.add_argument(
        "--tls-server-name", metavar="NAME", help="name the server certificate is checked against"
    )
    parser.add_argument(
        "--api-key", metavar="KEY", help="Temporal Cloud API key (turns TLS on; prefer the env)"
    )


def connection_from_args(args: argparse.Namespace) -> TemporalConnection:
    """The connection options the flags give."""
    from ..temporal._connection import TemporalConnection

    return TemporalConnection(
        tls_ca=getattr(args, "tls_ca", None),
        tls_cert=getattr(args, "tls_cert", None),
        tls_key=getattr(args, "tls_key", None),
        tls_server_name=getattr(args, "tls_server_name", None),
        api_key=getattr(args, "api_key", None),
    )
