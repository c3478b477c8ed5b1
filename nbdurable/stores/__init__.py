"""Bundled session stores and ``open_store(url)``."""

from __future__ import annotations

from .._errors import ConfigurationError
from ..durable.store import SessionStore
from .memory import InMemorySessionStore

__all__ = ["InMemorySessionStore", "open_store"]


def open_store(url: str) -> SessionStore:
    """Open a store from a URL.

    Supported: ``memory://`` (a new :class:`InMemorySessionStore`).

    Raises:
        ConfigurationError: The URL scheme is unknown.
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"store URL must be a string, not {url!r}")
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "memory":
        return InMemorySessionStore()
    raise ConfigurationError(f"unknown store URL {url!r}: expected memory://")
