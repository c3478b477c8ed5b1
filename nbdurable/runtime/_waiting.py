"""What ``Run.wait`` and ``Graph.wait`` share: the states asked for, and the deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._errors import ConfigurationError
from ..runs import ACTIVE_STATES, TERMINAL_STATES

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["LOCAL_EXECUTION_WAIT", "Backoff", "Deadline", "local_end", "wanted_states"]

LOCAL_EXECUTION_WAIT = 30.0
"""Seconds a wait on a run this process executes sleeps before reading it again anyway."""

BACKOFF_CAP = 1.0
"""Seconds a waiter's poll grows to at most while what it watches stays the same."""


def wanted_states(states: tuple[str, ...], known: Iterable[str]) -> frozenset[str]:
    """The states a waiter returns on: ``states``, or every final state when none is given.

    Raises:
        ConfigurationError: A name that is not a state (a typo would otherwise
            wait until the run ends).
    """
    names = frozenset(known)
    unknown = [s for s in states if s not in names]
    if unknown:
        raise ConfigurationError(
            f"unknown state(s) {', '.join(map(repr, unknown))}; one of: {', '.join(sorted(names))}"
        )
    return frozenset(states) if states else TERMINAL_STATES


class Deadline:
    """The end of a wait of ``timeout`` seconds (None: no end), on the running loop's clock."""

    def __init__(self, timeout: float | None, *, poll_interval: float | None = None) -> None:
        if timeout is not None and timeout < 0:
            raise ConfigurationError(f"timeout must be >= 0 seconds, not {timeout!r}")
        self.timeout = timeout
        self._backoff = Backoff(poll_interval) if poll_interval is not None else None
        self._loop = asyncio.get_running_loop()
        self._end = None if timeout is None else self._loop.time() + timeout

    def pause(self, poll_interval: float, what: str, state: str) -> float:
        """How long to sleep before looking again: at most ``poll_interval``.

        Raises:
            TimeoutError: The deadline passed; the message names ``what`` and its ``state``.
        """
        if self._end is None:
            return poll_interval
        left = self._end - self._loop.time()
        if left <= 0:
            raise TimeoutError(f"{what} is still {state} after {self.timeout:g} s")
        return min(poll_interval, left)

    def polling(self, what: str, state: str) -> float:
        """:meth:`pause` with the poll of :class:`Backoff` (given ``poll_interval``)."""
        assert self._backoff is not None, "Deadline(..., poll_interval=...) polls"
        return self.pause(self._backoff.after(state), what, state)


class Backoff:
    """A poll interval that doubles while what a waiter reads stays the same.

    An awaited wait is woken at once by every write of this process (the
    store's in-process notifications; PostgreSQL's ``LISTEN`` for other
    processes too); the poll is only for writes it is not told of: another
    process's on a SQLite or JSONL file. Polling a run that takes minutes
    every ``poll_interval`` costs a store read each time: with 200 runs
    waited on, 4,000 reads a second (issue 42). So the interval starts at
    ``poll_interval``, doubles while the state read is unchanged, up to
    ``max(poll_interval, BACKOFF_CAP)``, and starts again after a change.
    """

    def __init__(self, poll_interval: float) -> None:
        self.base = poll_interval
        self.cap = max(poll_interval, BACKOFF_CAP)
        self.current = poll_interval
        self._seen: object = _UNSEEN

    def after(self, seen: object) -> float:
        """The next pause, given what was just read."""
        if seen != self._seen:
            self._seen = seen
            self.current = self.base
        else:
            self.current = min(self.current * 2, self.cap)
        return self.current


_UNSEEN = object()


async def local_end(
    run: Run, state: str | None, wanted: frozenset[str], deadline: Deadline
) -> bool:
    """Wait for the end of this process's execution of ``run``; whether there was one.

    While this process's engine executes a run (``state`` is active), its state
    changes when that execution ends (a cancel from elsewhere ends it too), so
    a wait need not be woken by every step's notification nor poll: issue 42
    found those reads a third of a loaded runtime's. ``state`` None (not read
    yet): while this process executes the run it is active, so a wait for no
    active state waits for the execution's end before its first read (a read
    less a run). Waiting for ``cancelling``
    itself (written while the execution goes on) polls as before. The
    execution's done callbacks (the engine's own) run before this returns.
    Rereads anyway after :data:`LOCAL_EXECUTION_WAIT` seconds.

    Raises:
        TimeoutError: ``deadline`` passed.
    """
    execution = run.runtime.engine.execution(run.run_id)
    if state is None and wanted & ACTIVE_STATES:
        return False  # the state it is in may be the one wanted: read it first
    if execution is None or state not in (None, *ACTIVE_STATES) or "cancelling" in wanted:
        return False
    if execution.get_loop() is not asyncio.get_running_loop():
        # A wait on another thread (``wait_sync`` beside a kernel's loop): another
        # loop's task cannot wake this one safely, so it reads the store as before.
        return False
    try:
        pause = deadline.pause(LOCAL_EXECUTION_WAIT, f"run {run.run_id!r}", state or "running")
    except TimeoutError:
        if state is None:
            return False  # no time left to wait: the read says what the run is
        raise
    await asyncio.wait({execution}, timeout=pause)
    return True
