"""The storage seam: the SessionStore protocol and how the loop calls it."""

from __future__ import annotations

import builtins
import inspect
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

from .checkpoint import AgentCheckpoint, CheckpointInfo
from .records import RunRecord

__all__ = [
    "HISTORY",
    "INCREMENTAL",
    "MULTIPROCESS",
    "PERSISTENT",
    "REMOTE",
    "RUNTIME",
    "VERSIONED_SCHEMA",
    "DurableSession",
    "HistoryStore",
    "SessionStore",
    "maybe_await",
    "supports",
]

# Capabilities a store declares in its ``capabilities`` class attribute; the
# conformance suite runs each capability's tests on every store that declares it.
HISTORY = "history"
"""``load(run_id, step_index=)``, ``history``, ``list``, ``list_runs`` and ``delete``."""
PERSISTENT = "persistent"
"""Checkpoints outlive the process; a committed save survives a SIGKILL."""
INCREMENTAL = "incremental"
"""A save writes only what is new: its cost does not grow with the history."""
MULTIPROCESS = "multiprocess"
"""Several processes may write different runs to one store at once."""
VERSIONED_SCHEMA = "versioned_schema"
"""The storage layout carries a version; opening a newer one is refused."""
RUNTIME = "runtime"
"""Run records, leases, tool intents and the model journal for ``DurableRuntime``."""
REMOTE = "remote"
"""Reads cross a network (a round trip each): ``DurableRuntime`` keeps a mirror of
its run records so that synchronous reads on the event loop never wait for one."""

T = TypeVar("T")


@runtime_checkable
class SessionStore(Protocol):
    """Where checkpoints live. ``save`` and ``load`` are required.

    Either method may be a plain function or a coroutine function. ``load``
    returns the latest saved checkpoint of a run, or None for an unknown run.
    Optional methods the loop never calls: ``delete(run_id)`` and ``list()``
    (the stored run ids); stores that keep history implement
    :class:`HistoryStore`.
    """

    def save(self, checkpoint: AgentCheckpoint) -> Awaitable[None] | None:
        """Store a checkpoint (the latest save of a run wins for ``load``)."""
        ...

    def load(self, run_id: str) -> AgentCheckpoint | Awaitable[AgentCheckpoint | None] | None:
        """Return the latest checkpoint of ``run_id``, or None."""
        ...


@runtime_checkable
class HistoryStore(SessionStore, Protocol):
    """A store with the ``history`` capability: every bundled store is one.

    Every checkpoint is kept; ``load`` without a step returns the latest save.
    """

    capabilities: ClassVar[frozenset[str]]
    """What the store can do (``HISTORY``, ``PERSISTENT``, ...)."""

    def save(self, checkpoint: AgentCheckpoint) -> None:
        """Store a checkpoint; it becomes the run's latest."""
        ...

    def load(self, run_id: str, step_index: int | None = None) -> AgentCheckpoint | None:
        """Return the latest checkpoint, or the latest saved at ``step_index``; None if absent."""
        ...

    def history(self, run_id: str) -> builtins.list[CheckpointInfo]:
        """Metadata of every checkpoint of a run in save order, without messages."""
        ...

    def list(self) -> builtins.list[str]:
        """Run ids, oldest run first."""
        ...

    def list_runs(self) -> builtins.list[RunRecord]:
        """One record per run, oldest run first."""
        ...

    def delete(self, run_id: str) -> None:
        """Delete a run and its history; unknown run ids are a no-op."""
        ...

    def close(self) -> None:
        """Release files and connections; the store is unusable afterwards."""
        ...


def supports(store: object, capability: str) -> bool:
    """Whether ``store`` declares ``capability`` (stores without declarations declare none)."""
    declared: object = getattr(store, "capabilities", frozenset())
    return isinstance(declared, frozenset) and capability in declared


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
        store_retry_ms: How long a save (or the load at the start) that fails for
            a connection-level reason (the database restarting, SQLite's write
            lock held past its busy timeout) is retried, with backoff, before
            it is logged as a failed save and the run goes on. 0: not retried.
    """

    store: SessionStore
    run_id: str | None = None
    store_retry_ms: int = 60_000

    def __post_init__(self) -> None:
        retry = self.store_retry_ms
        if isinstance(retry, bool) or not isinstance(retry, int) or retry < 0:
            from .._errors import ConfigurationError

            raise ConfigurationError(f"store_retry_ms must be an integer >= 0, not {retry!r}")
