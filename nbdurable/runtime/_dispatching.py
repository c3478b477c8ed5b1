"""The part of an engine whose runs execute on a server of their own: this process dispatches.

Temporal and Restate execute legs on their workers or endpoints; the runtime's
process only sends them what changed in the store (a newly pending run, a
cancellation). The loop that does so is the same for both: woken by a
submission, a verdict, a retry or a cancel, else every ``poll_interval``; a
server that is away is tried again next period, said once until it answers.

A client waiting for a run (``Run.wait``, ``result()``) reads the store; on a
store that cannot tell it of another process's writes (SQLite) it polls with a
backoff up to a second, so the end of a leg a worker executed was noticed up to
a second late. The engine that sent a leg can await the server's own answer
that it ended (:meth:`DispatchingEngine.watch_end`: Restate's attach, Temporal's
workflow result) and wake the process's waiters then.

What is sent is decided here too (:meth:`DispatchingEngine.dispatch_once`): each
record that became ``pending`` once (a client at once; a worker's or an
endpoint's engine, ``adopt_after``, only once it stayed pending that long, so
clients go first), each run cancelled since; the engine says how
(:meth:`~DispatchingEngine.send`, :meth:`~DispatchingEngine.cancel`).
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import ClassVar

from .._aio import wait_event
from ..durable.store import notify
from ..runs import RuntimeRun, of_engine
from ._foreign import ForeignRuns
from ._seam import Engine, RunServices

__all__ = ["CANCEL_SCAN_MS", "MAX_WATCHED", "DispatchingEngine"]

CANCEL_SCAN_MS = 1000
"""How often (ms) a dispatcher looks for runs cancelled by another process."""

MAX_WATCHED = 256
"""Legs in flight whose end an engine awaits at most (a connection or a long poll each);
past it, waiters poll."""


class DispatchingEngine(Engine):
    """An :class:`Engine` that dispatches runs to an external server.

    Subclasses name the server (:attr:`server`) and the record kinds it runs
    (:attr:`kinds`, :attr:`cancels`), implement :meth:`send` and :meth:`cancel`,
    and call ``super().__init__(adopt_after)``.

    Args:
        adopt_after: For a worker's (or an endpoint's) engine: leave pending runs
            to clients for this many seconds, then send those still pending.
            None (a client): at once.
    """

    server: ClassVar[str]
    """The server's name in log lines (``Temporal``, ``Restate``)."""
    kinds: ClassVar[tuple[str, ...]]
    """The record kinds whose pending runs it sends."""
    cancels: ClassVar[tuple[str, ...]]
    """The record kinds whose cancellations it sends."""

    runtime: RunServices

    def __init__(self, adopt_after: float | None = None) -> None:
        self.adopt_after = adopt_after
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False  # ends the dispatcher should it swallow its cancellation
        self._since = 0
        self._failing = False
        self._watched: dict[str, asyncio.Task[None]] = {}
        self._sent: set[tuple[str, int, str]] = set()
        self._cancel_scan = 0
        self._foreign = ForeignRuns(self.name)

    @abstractmethod
    async def send(self, record: RuntimeRun) -> bool:
        """Start the next leg of a pending run; False: not sent (tried again next time)."""

    @abstractmethod
    async def cancel(self, record: RuntimeRun) -> bool:
        """Stop a cancelled run's execution; False: nothing found yet (looked for again)."""

    def takes(self, record: RuntimeRun) -> bool:
        """Whether this engine sends the pending run of its name (default: every one)."""
        return True

    async def dispatch_once(self, woken: bool = True) -> None:
        """Send every newly pending run; cancel every newly cancelled one (``woken``: asked)."""
        store = self.runtime.runtime_store
        pending: set[tuple[str, int, str]] = set()
        for record in store.rt_list(["pending"]):
            key = (record.run_id, record.updated_at, "send")
            pending.add(key)
            if record.kind not in self.kinds or key in self._sent or not self._due(record):
                continue
            if not of_engine(record, self.name):
                self._foreign.leave(record, self.runtime.deps.logger)
                continue
            if not self.takes(record):
                continue
            # Sending is slow next to legs: one that took the record meanwhile may
            # have ended already, and a send now would start a leg for nothing.
            current = store.rt_get(record.run_id)
            if current is None or (current.state, current.updated_at) != ("pending", key[1]):
                continue
            if await self.send(current):
                self._sent.add(key)
        # Finished runs pile up: the ones cancelled while parked are looked for
        # when a client's user decided something, else about once a second (a
        # worker's runtime is woken by every state change its legs write).
        now = self.runtime.now()
        states = ["cancelling"]
        if (woken and self.adopt_after is None) or now - self._cancel_scan >= CANCEL_SCAN_MS:
            states.append("cancelled")
            self._cancel_scan = now
        for record in store.rt_list(states):
            key = (record.run_id, record.updated_at, "cancel")
            if record.kind not in self.cancels or key in self._sent:
                continue
            if not of_engine(record, self.name):
                continue
            if record.state == "cancelled" and record.updated_at < self._since:
                continue
            if await self.cancel(record) or record.state == "cancelled":
                self._sent.add(key)
        # Keys of records that changed since can never match again.
        self._sent = {k for k in self._sent if k[2] == "cancel" or k in pending}
        self._foreign.keep_only(k[0] for k in pending)

    def _due(self, record: RuntimeRun) -> bool:
        """Whether this engine sends the pending record now (a worker's wait)."""
        if self.adopt_after is None:
            return True
        return self.runtime.now() - record.updated_at >= self.adopt_after * 1000

    def start(self, runtime: RunServices) -> None:
        """Start dispatching the runtime's pending runs to the server."""
        self.runtime = runtime
        self._since = runtime.now()
        self._loop_task = asyncio.get_running_loop().create_task(self._dispatch())

    def wake(self) -> None:
        """Dispatch now (a submission, a verdict, a retry, a cancel)."""
        self._wake.set()

    def watch_end(self, key: str, run_id: str, ended: Callable[[], Awaitable[object]]) -> None:
        """Wake this process's waiters on ``run_id`` when ``ended()`` returns.

        ``ended`` awaits the server's word that the leg ``key`` ended (its last
        step wrote the store before). Only a wake-up: whatever it raises leaves
        the waiters to their poll, as does a leg past :data:`MAX_WATCHED`.
        """
        if key in self._watched or len(self._watched) >= MAX_WATCHED:
            return

        async def watch() -> None:
            try:
                await ended()
            except Exception:
                return
            finally:
                self._watched.pop(key, None)
            notify(self.runtime.store, run_id)
            self.wake()  # what the leg's end made pending (a graph's next node) goes now

        self._watched[key] = asyncio.get_running_loop().create_task(watch())

    def cancel_local(self, run_id: str) -> bool:
        """Cancellation goes through the server: the dispatcher sends it."""
        self._wake.set()
        return True

    async def close(self) -> None:
        """Stop dispatching (what runs on the server goes on: its workers own it)."""
        if self._loop_task is not None:
            with contextlib.suppress(Exception):
                await self.dispatch_once()  # what was decided just now still reaches the server
            self._closing = True  # Python 3.11's wait_for may swallow the cancel below
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        watched, self._watched = list(self._watched.values()), {}
        for task in watched:
            task.cancel()
        await asyncio.gather(*watched, return_exceptions=True)

    async def _dispatch(self) -> None:
        while not self._closing:
            woken = self._wake.is_set()
            self._wake.clear()
            try:
                await self.dispatch_once(woken)
                self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the server is away: try again next period, say so once
                if not self._failing:
                    self.runtime.deps.logger.error(
                        "nbdurable: %s dispatch failed: %s", self.server, exc
                    )
                self._failing = True
            await wait_event(self._wake, self.poll_period())

    def poll_period(self) -> float:
        """Seconds between dispatches unless woken (``poll_interval``, 50 ms at least)."""
        return max(self.runtime.poll_interval, 0.05)
