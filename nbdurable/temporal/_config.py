"""What the client hands each workflow: its run and the activity timeouts."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TemporalConfig"]


@dataclass(frozen=True)
class TemporalConfig:
    """Timeouts of the activities a run's workflow schedules.

    Attributes:
        run_id: The run (also the workflow id).
        model_timeout: Seconds one model attempt may take.
        tool_timeout: Seconds one tool call may take.
        heartbeat_timeout: Seconds without a heartbeat before an activity counts as
            lost (its worker died); activities heartbeat while a model or tool runs.
        tool_retries: Attempts of a ``safe`` or ``idempotent`` tool after worker loss.
    """

    run_id: str
    model_timeout: float = 300.0
    tool_timeout: float = 600.0
    heartbeat_timeout: float = 10.0
    tool_retries: int = 5
