"""The store a command works on: ``--store URL``, opened once and closed after."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._errors import RunNotFoundError
from ..stores._default import DEFAULT_STORE, default_store

__all__ = ["DEFAULT_STORE", "STORE_HELP", "add_store_url", "default_store", "opened_store"]

STORE_HELP = f"store URL (default: $NBDURABLE_STORE, else {DEFAULT_STORE})"


def add_store_url(parser: argparse.ArgumentParser) -> None:
    """The store URL as an optional positional argument (the ``store`` commands)."""
    parser.add_argument("url", nargs="?", default=None, metavar="URL", help=STORE_HELP)


@contextmanager
def opened_store(url: str, *, create: bool = False) -> Iterator[Any]:
    """The store at ``url``, closed when the block ends.

    Commands that read or steer existing runs leave ``create`` False: a store
    that does not exist is then an error naming its path, not a new empty file.
    """
    from ..stores import open_store

    store: Any = open_store(url, create=create)
    try:
        yield store
    except RunNotFoundError as exc:
        # "no such run" says where it looked: a wrong --store reads as a wrong id otherwise
        if url in str(exc):
            raise
        raise RunNotFoundError(exc.run_id, f"{str(exc).rstrip('.')} in {url}") from None
    finally:
        store.close()
