"""The ``--notify-url`` options of ``nbdurable serve`` and ``nbdurable worker``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..runtime._notify import Notifier

__all__ = ["add_notify_options", "notifier_from_args"]


def add_notify_options(parser: argparse.ArgumentParser, *, public_url: bool) -> None:
    """Add ``--notify-url`` and ``--notify-without-links`` (and ``--public-url`` when asked)."""
    parser.add_argument(
        "--notify-url",
        default=None,
        metavar="URL",
        help="POST a signed JSON message here when a run starts waiting on a human "
        "(the HMAC key: NBDURABLE_NOTIFY_SECRET)",
    )
    parser.add_argument(
        "--notify-without-links",
        action="store_true",
        help="leave the signed approval link out of notifications",
    )
    if public_url:
        parser.add_argument(
            "--public-url",
            default=None,
            help="base URL of the HTTP bridge, for the approval links of notifications",
        )


def notifier_from_args(args: argparse.Namespace) -> Notifier | None:
    """The :class:`Notifier` the options ask for, or None without ``--notify-url``.

    Raises:
        ConfigurationError: A bad URL, or no ``NBDURABLE_NOTIFY_SECRET``.
    """
    url: Any = getattr(args, "notify_url", None)
    if not url:
        return None
    from ..runtime._notify import Notifier

    return Notifier(
        url,
        public_url=getattr(args, "public_url", None),
        include_links=not getattr(args, "notify_without_links", False),
    )
