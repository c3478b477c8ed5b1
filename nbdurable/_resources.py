"""Long-lived connections that tools open lazily (MCP sessions), closed together.

A :class:`ResourceScope` holds them by key. A ``DurableRuntime`` owns one: its
runs' tasks see it as the current scope, and ``close()`` closes what it holds
(an MCP stdio server's child process is stopped and reaped). Code that runs
outside a runtime (``generate_text`` in a notebook cell) uses one scope per
event loop, which lives as long as the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Protocol

__all__ = ["Closable", "ResourceScope", "current_scope"]

_log = logging.getLogger("nbdurable")


class Closable(Protocol):
    """What a scope holds: something with an async ``aclose()``."""

    async def aclose(self) -> None:
        """Release the resource (never raises for an already broken one)."""


class ResourceScope:
    """Resources by key, opened on first use and closed together."""

    def __init__(self) -> None:
        self._items: dict[Hashable, Closable] = {}

    def get(self, key: Hashable, factory: Callable[[], Closable]) -> Any:
        """The resource under ``key``, made with ``factory()`` the first time."""
        item = self._items.get(key)
        if item is None:
            item = self._items[key] = factory()
        return item

    def peek(self, key: Hashable) -> Any:
        """The resource under ``key`` if one was made, else None."""
        return self._items.get(key)

    async def discard(self, key: Hashable) -> None:
        """Close and forget the resource under ``key`` (nothing if there is none)."""
        item = self._items.pop(key, None)
        if item is not None:
            await _close(item)

    async def aclose(self) -> None:
        """Close every resource; one that fails to close is logged and skipped."""
        items, self._items = list(self._items.values()), {}
        for item in items:
            await _close(item)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Make this the current scope of tasks created inside the block."""
        token = _CURRENT.set(self)
        try:
            yield
        finally:
            _CURRENT.reset(token)


async def _close(item: Closable) -> None:
    try:
        await item.aclose()
    except Exception:  # closing must go on for the others
        _log.warning("nbdurable: closing %r failed", item, exc_info=True)


_CURRENT: contextvars.ContextVar[ResourceScope | None] = contextvars.ContextVar(
    "nbdurable_resource_scope", default=None
)
_LOOP_SCOPES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ResourceScope] = (
    weakref.WeakKeyDictionary()
)


def current_scope() -> ResourceScope:
    """The runtime's scope inside its runs, else the running event loop's own scope."""
    scope = _CURRENT.get()
    if scope is not None:
        return scope
    loop = asyncio.get_running_loop()
    scope = _LOOP_SCOPES.get(loop)
    if scope is None:
        scope = _LOOP_SCOPES[loop] = ResourceScope()
    return scope
