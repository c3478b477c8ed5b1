"""The storage seam: the SessionStore protocol and how the loop calls it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from .checkpoint import AgentCheckpoint

__all__ = ["DurableSession", "SessionStore", "maybe_await"]

T = TypeVar("T")


@runtime_checkable
class SessionStore(Protocol):
    """Where checkpoints live. ``save`` and ``load`` are required.

    Either method may be a plain function or a coroutine function. ``load``
    returns the latest saved checkpoint of a run, or None for an unknown run.
    Optional methods the loop never calls: ``delete(run_id)`` and ``list()``
    (the stored run ids).
    """

    def save(self, checkpoint: AgentCheckpoint) -> Awaitable[None] | None:
        """Store a checkpoint (the latest save of a run wins for ``load``)."""
        ...

    def load(self, run_id: str) -> AgentCheckpoint | Awaitable[AgentCheckpoint | None] | None:
        """Return the latest checkpoint of ``run_id``, or None."""
        ...


async def maybe_await(value: T | Awaitable[T]) -> T:
    """Await ``value`` when it is awaitable, so sync and async stores both work."""
    if inspect.isawaitable(value):
        return await value
    return value


@dataclass(frozen=True)
class DurableSession:
    """Opt-in durability for one call: where the run checkpoints and under which id.

    Attributes:
        store: Any :class:`SessionStore`.
        run_id: Stable id of the run; generated with ``deps.generate_id()`` when None.
    """

    store: SessionStore
    run_id: str | None = None
