"""What ``Run.wait`` and ``Graph.wait`` share: the states asked for, and the deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from .._errors import ConfigurationError
from ..runs import TERMINAL_STATES

__all__ = ["Deadline", "wanted_states"]


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

    def __init__(self, timeout: float | None) -> None:
        if timeout is not None and timeout < 0:
            raise ConfigurationError(f"timeout must be >= 0 seconds, not {timeout!r}")
        self.timeout = timeout
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
