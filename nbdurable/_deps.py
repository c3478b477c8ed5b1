"""Injectable dependencies: the clock, the timer, the id generator and the logger.

The agent loop never reads the wall clock or a random source directly; it asks
these. Tests and the Temporal engine inject deterministic versions.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["Clock", "Deps", "Logger", "SystemClock", "new_id"]


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now()`` returning epoch milliseconds."""

    def now(self) -> int:
        """Return the current time in epoch milliseconds."""
        ...


class Logger(Protocol):
    """The subset of :class:`logging.Logger` the loop uses."""

    def error(self, msg: str, *args: Any, **kwargs: Any) -> None:
        """Log an error."""
        ...

    def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
        """Log a warning."""
        ...


class SystemClock:
    """The wall clock, in epoch milliseconds."""

    def now(self) -> int:
        """Return the wall-clock time in epoch milliseconds."""
        return time.time_ns() // 1_000_000


def new_id() -> str:
    """Return a fresh random id (32 hex characters)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Deps:
    """Dependencies the loop takes from outside.

    Attributes:
        clock: Source of ``created_at`` and token ``issued_at`` times.
        sleep: Waits a number of seconds of ``clock`` time: the embedded engine's
            polls and lease renewals wait on it, so a test's controllable clock
            (one whose ``sleep`` returns when the test moves it on) drives them
            without waiting on the wall clock.
        generate_id: Source of run ids and approval ids.
        logger: Receives best-effort failures (a raising ``save``, a raising signer).
    """

    clock: Clock = field(default_factory=SystemClock)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    generate_id: Callable[[], str] = new_id
    logger: Logger = field(default_factory=lambda: logging.getLogger("nbdurable"))
