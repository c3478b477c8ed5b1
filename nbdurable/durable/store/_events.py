"""The event-log half of the store seam, and the in-process wake-up hub."""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..._errors import ConfigurationError, RunNotFoundError
from .._checkpoint import AgentCheckpoint
from ._capability import Capability

if TYPE_CHECKING:
    from ...events._model import Event, NewEvent

__all__ = [
    "EVENTS",
    "Armed",
    "EventLog",
    "EventStore",
    "channel_of",
    "events_since",
    "notify",
    "notify_all",
    "refuse_fence",
    "wait_for_events",
    "watch",
]

EVENTS = Capability.EVENTS
"""The ``events`` capability by its former name."""


class EventLog(ABC):
    """A store with the ``events`` capability: a per-run event log.

    Offsets are per run, start at 1 and have no holes; the store assigns them
    inside the transaction that writes the events. A store that also keeps run
    records (:class:`RunStore`) checks a runtime owner's ``fence`` on every
    write: a stale one raises :class:`~nbdurable.FencedOutError` and writes nothing.
    """

    @abstractmethod
    def append_events(
        self, run_id: str, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> Sequence[Event]:
        """Append events to a run's log in one transaction; return them with offsets."""

    @abstractmethod
    def save_with_events(
        self, checkpoint: AgentCheckpoint, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> Sequence[Event]:
        """Save a checkpoint and append events in the same transaction."""

    @abstractmethod
    def read_events(self, run_id: str, after: int = 0, limit: int | None = None) -> Sequence[Event]:
        """Events with offset > ``after`` in order; raises RunNotFoundError for an unknown run."""

    def last_event_offset(self, run_id: str) -> int:
        """The offset of the run's latest event; 0 when it has none (or is unknown).

        Lets a reader start near the end of a long log (:func:`events_since`).
        The default reads the whole log; a store that knows the offset overrides it.
        """
        try:
            logged = self.read_events(run_id)
        except RunNotFoundError:
            return 0
        return logged[-1].offset if logged else 0

    @property
    def saves_extensions(self) -> bool:
        """Whether ``save``/``save_with_events`` take ``extends`` (default: no).

        ``extends``: the history the new checkpoint's messages begin with, a
        hint to write only the tail.
        """
        return False

    @property
    def event_channel(self) -> object:
        """What identifies this log across store objects in this process.

        Two store objects on one SQLite file share a channel, so a subscriber on
        one is woken by a writer on the other. Default: None (this object alone).
        """
        return None

    async def wait_for_events(
        self, run_id: str, timeout: float, *, after: int | None = None, armed: Armed | None = None
    ) -> None:
        """Sleep until ``run_id``'s log may go further than ``after``, or ``timeout`` passes.

        The default wakes on this process's writers (``armed``: the hub's wake-up
        registered before the caller's read) and polls by ``timeout`` for the
        others; a store notified across processes (PostgreSQL's ``LISTEN``)
        overrides it.
        """
        await (armed or Armed(self, run_id)).wait(timeout)

    def listen(self, timeout: float = 10.0) -> bool:
        """Have notifications from other processes in place before the first wait.

        Returns whether they are; the default has none to start (False).
        """
        return False


EventStore = EventLog
"""The former name of :class:`EventLog` (sync and async stores alike are one now)."""


def refuse_fence(fence: int | None) -> None:
    """For a log without run records: a fence cannot be checked, so none may be given.

    Raises:
        ConfigurationError: ``fence`` is not None.
    """
    if fence is not None:
        raise ConfigurationError("this store keeps no run records: an append cannot be fenced")


def channel_of(store: object) -> object:
    """What identifies a store's log across store objects in this process.

    Two store objects on one SQLite file share a channel, so a subscriber on one
    is woken by a writer on the other.
    """
    channel = store.event_channel if isinstance(store, EventLog) else None
    return channel if channel is not None else id(store)


# In-process wake-ups: subscribers waiting on (channel, run_id). Writers may run
# on any thread, so futures are resolved through their own loop.
_waiters: dict[tuple[object, str], list[asyncio.Future[None]]] = {}
_lock = threading.Lock()
# Callbacks told of every wake-up on a channel, whatever the run (see watch()).
_watchers: dict[object, list[Callable[[str | None], None]]] = {}


def watch(store: object, callback: Callable[[str | None], None]) -> Callable[[], None]:
    """Call ``callback(run_id)`` on every :func:`notify` of ``store``'s channel.

    ``callback(None)`` means any run may have changed (:func:`notify_all`). The
    callback runs on the notifying thread (a store thread, PostgreSQL's listener
    thread, the event loop), so it must return at once. Returns the function
    that stops watching.
    """
    key = channel_of(store)
    with _lock:
        _watchers.setdefault(key, []).append(callback)

    def unwatch() -> None:
        with _lock:
            callbacks = _watchers.get(key, [])
            if callback in callbacks:
                callbacks.remove(callback)
            if not callbacks:
                _watchers.pop(key, None)

    return unwatch


def notify_all(store: object) -> None:
    """Tell ``store``'s watchers that any run may have changed (a missed notification)."""
    with _lock:
        callbacks = list(_watchers.get(channel_of(store), ()))
    for callback in callbacks:
        callback(None)


def notify(store: object, run_id: str) -> None:
    """Wake every in-process subscriber of ``run_id`` on ``store``'s channel."""
    with _lock:
        waiters = _waiters.pop((channel_of(store), run_id), [])
        callbacks = list(_watchers.get(channel_of(store), ()))
    for callback in callbacks:
        callback(run_id)
    for waiter in waiters:
        loop = waiter.get_loop()
        if loop.is_closed():
            continue
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            if not waiter.done():
                waiter.set_result(None)
        else:
            loop.call_soon_threadsafe(_wake, waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Armed:
    """A wake-up on ``run_id`` registered before the read it follows.

    Arm, read, then :meth:`wait`: a local write that lands between the read and
    the wait (a store call runs on another thread) still wakes it.
    """

    def __init__(self, store: object, run_id: str) -> None:
        self._future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._key = (channel_of(store), run_id)
        with _lock:
            _waiters.setdefault(self._key, []).append(self._future)

    async def wait(self, timeout: float) -> None:
        """Sleep until a local writer appended since arming, or ``timeout`` seconds pass."""
        try:
            # asyncio.wait, not wait_for: Python 3.11's wait_for swallows a cancellation
            # that arrives as the waiter completes, leaving the cancelled task waiting on.
            await asyncio.wait({self._future}, timeout=timeout)
        finally:
            self.disarm()

    def disarm(self) -> None:
        """Stop listening (idempotent)."""
        with _lock:
            pending = _waiters.get(self._key)
            if pending is not None and self._future in pending:
                pending.remove(self._future)
                if not pending:
                    del _waiters[self._key]


async def wait_for_events(store: object, run_id: str, timeout: float) -> None:
    """Sleep until a local writer appends to ``run_id`` or ``timeout`` seconds pass.

    The timeout is the polling interval that catches writers in other processes.
    """
    await Armed(store, run_id).wait(timeout)


def events_since(log: EventLog, run_id: str, event_type: str) -> list[Event]:
    """The run's events from its latest ``event_type`` event on (every event without one).

    Reads backwards from :meth:`EventLog.last_event_offset` in windows that grow
    4x, so a resume of a long run reads the tail of its log, not all of it
    (issue 42: a 5,000-step run's whole log took 0.7 s to read and decode).
    Each window is an ordinary :meth:`EventLog.read_events` read from an offset
    to the end, checked as every read is (a missing offset is an error).
    """
    last = log.last_event_offset(run_id)
    window = 64
    while True:
        after = max(0, last - window)
        logged = log.read_events(run_id, after=after)
        for i in range(len(logged) - 1, -1, -1):
            if logged[i].type == event_type:
                return list(logged[i:])
        if after == 0:
            return list(logged)
        window *= 4
