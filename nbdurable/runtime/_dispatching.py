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
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import ClassVar

from .._aio import wait_event
from ..durable.store import notify
from ._seam import Engine, RunServices

__all__ = ["MAX_WATCHED", "DispatchingEngine"]

MAX_WATCHED = 256
"""Legs in flight whose end an engine awaits at most (a connection or a long poll each);
past it, waiters poll."""


class DispatchingEngine(Engine):
    """An :class:`Engine` that dispatches runs to an external server.

    Subclasses name the server (:attr:`server`), implement :meth:`dispatch_once`
    and call ``super().__init__()``.
    """

    server: ClassVar[str]
    """The server's name in log lines (``Temporal``, ``Restate``)."""

    runtime: RunServices

    def __init__(self) -> None:
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._closing = False  # ends the dispatcher should it swallow its cancellation
        self._since = 0
        self._failing = False
        self._watched: dict[str, asyncio.Task[None]] = {}

    @abstractmethod
    async def dispatch_once(self, woken: bool = True) -> None:
        """Send the server what changed since the last call (``woken``: a wake-up did it)."""

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
