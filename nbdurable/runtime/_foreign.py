"""Runs submitted to another engine: left alone, and said so once per run in the log."""

from __future__ import annotations

from collections.abc import Iterable

from .._deps import Logger
from ..runs import RuntimeRun

__all__ = ["ForeignRuns"]


class ForeignRuns:
    """The runs of another engine that an engine has said it leaves alone."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self._left: set[str] = set()

    def leave(self, record: RuntimeRun, logger: Logger) -> None:
        """Say once per run that ``record`` is left to the engine it was submitted to."""
        if record.run_id in self._left:
            return
        self._left.add(record.run_id)
        logger.warning(
            "nbdurable: run %s was submitted to the %s engine: this %s engine leaves it "
            "to that engine's workers (docs/runtime.md: moving runs to another engine)",
            record.run_id,
            record.engine,
            self.engine,
        )

    def keep_only(self, run_ids: Iterable[str]) -> None:
        """Forget the runs no longer waiting (a run that comes back is said again)."""
        self._left &= set(run_ids)
