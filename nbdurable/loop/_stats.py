"""What the step in flight did (time in model and tool calls, tools called), for its checkpoint."""

from __future__ import annotations

from .._deps import Clock
from ..durable._checkpoint import StepStats

__all__ = ["StepTimer"]


class StepTimer:
    """Collects one step's :class:`StepStats` between two checkpoints.

    The step starts at the first reading of the clock after the previous
    checkpoint (its first model call, usually).

    Args:
        clock: The leg's clock (epoch milliseconds).
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._started: int | None = None
        self._model_ms = 0
        self._tool_ms = 0
        self._tool_calls: list[str] = []

    def now(self) -> int:
        """The clock's reading (the step's start, if it is the step's first)."""
        now = int(self._clock.now())
        if self._started is None:
            self._started = now
        return now

    def model_call(self, began: int, tool_calls: list[str] | None = None) -> None:
        """Count a model call that began at ``began`` and ended now, and the calls it made."""
        self._model_ms += self.now() - began
        self._tool_calls += tool_calls or []

    def tools(self, began: int) -> None:
        """Count a batch of tool calls that began at ``began`` and ended now."""
        self._tool_ms += self.now() - began

    def finish(self) -> StepStats:
        """The step's stats; the next reading of the clock starts the next step."""
        started = self._started if self._started is not None else self.now()
        stats = StepStats(
            started_at=started,
            model_ms=self._model_ms,
            tool_ms=self._tool_ms,
            tool_calls=tuple(self._tool_calls),
        )
        self._started, self._model_ms, self._tool_ms, self._tool_calls = None, 0, 0, []
        return stats
