"""The checkpoint half of the store seam: the loop's minimum and the history base class."""

from __future__ import annotations

import builtins
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

from .._checkpoint import AgentCheckpoint, CheckpointInfo
from .._records import RunRecord
from ._capability import Capability
from ._prune import PruneReport, prune_runs

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

# The capabilities by their former names (strings before Capability; they still compare equal).
HISTORY = Capability.HISTORY
PERSISTENT = Capability.PERSISTENT
INCREMENTAL = Capability.INCREMENTAL
MULTIPROCESS = Capability.MULTIPROCESS
VERSIONED_SCHEMA = Capability.VERSIONED_SCHEMA
RUNTIME = Capability.RUNTIME
REMOTE = Capability.REMOTE

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


class HistoryStore(ABC):
    """The checkpoint store base class: every bundled store is one.

    Every checkpoint is kept; ``load`` without a step returns the latest save.
    A store subclasses it, implements the abstract methods and declares what
    else it can do in :attr:`capabilities` (the conformance suite,
    :mod:`nbdurable.testing`, proves each). The other methods are optional:
    each has a default a store overrides when it has something better.
    A store keeping run records also subclasses :class:`RunStore`, one with an
    event log :class:`EventLog`.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.HISTORY})
    """What the store can do (:class:`Capability` members)."""

    @abstractmethod
    def save(self, checkpoint: AgentCheckpoint) -> None:
        """Store a checkpoint; it becomes the run's latest."""

    @abstractmethod
    def load(self, run_id: str, step_index: int | None = None) -> AgentCheckpoint | None:
        """Return the latest checkpoint, or the latest saved at ``step_index``; None if absent.

        Raises:
            StoreCorruptionError: The checkpoint's data is damaged (names the run and step).
            CheckpointVersionError: The checkpoint was written with a newer version.
        """

    @abstractmethod
    def history(self, run_id: str) -> builtins.list[CheckpointInfo]:
        """Metadata of every checkpoint of a run in save order, without messages."""

    @abstractmethod
    def list(self) -> builtins.list[str]:
        """Run ids, oldest run first."""

    @abstractmethod
    def list_runs(self) -> builtins.list[RunRecord]:
        """One record per run, oldest run first."""

    @abstractmethod
    def delete(self, run_id: str) -> None:
        """Delete a run and its history; unknown run ids are a no-op."""

    def close(self) -> None:  # noqa: B027 - optional: a store without resources keeps it
        """Release files and connections; the store is unusable afterwards. Default: nothing."""

    @property
    def location(self) -> Path | None:
        """The file or directory the store lives in; None (the default) for a server or memory.

        Files that belong with the store's data (the approval secret) are kept beside it.
        """
        return None

    def recover_connections(self, error: BaseException | None = None) -> None:  # noqa: B027
        """Called when a call failed for a connection-level reason, before it is retried.

        A pooled store checks its connections here. Default: nothing.
        """

    def reclaim_space(self) -> str | None:
        """Give freed space back after a prune; how, or None (the default: nothing to do)."""
        return None

    def prune(self, finished_before: int, *, dry_run: bool = False) -> PruneReport:
        """Delete the runs that finished before ``finished_before`` (epoch ms).

        Each goes with its checkpoints, events and run record; an unfinished run
        (or one tied to an unfinished run) never goes. The default
        (:func:`~nbdurable.durable.store.prune_runs`) deletes through
        :meth:`delete`, then calls :meth:`reclaim_space`.
        """
        return prune_runs(self, finished_before, dry_run=dry_run, reclaim=self.reclaim_space)


def supports(store: object, capability: Capability | str) -> bool:
    """Whether ``store`` is a :class:`HistoryStore` declaring ``capability``.

    ``store`` may be a store or a store class. Any other object (a store with
    only ``save`` and ``load``) declares none.
    """
    if isinstance(store, type):
        return issubclass(store, HistoryStore) and capability in store.capabilities
    return isinstance(store, HistoryStore) and capability in store.capabilities


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
            from ..._errors import ConfigurationError

            raise ConfigurationError(f"store_retry_ms must be an integer >= 0, not {retry!r}")
