"""Run records: one row per run, as ``list_runs()`` returns them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..messages import Usage
from ._checkpoint import CheckpointInfo, CheckpointStatus, ForkPoint

__all__ = ["RunRecord", "latest_record"]


class RunRecord(BaseModel):
    """A run as the store sees it: its latest checkpoint's metadata plus timestamps.

    A runtime run's state is not here: it lives in the runtime's run record
    (:class:`~nbdurable.runs.RuntimeRun`). Fields are added as
    optional with defaults, so records of older stores still load.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    status: CheckpointStatus
    """Status of the latest checkpoint."""
    step_index: int
    """``step_index`` of the latest checkpoint."""
    step_count: int
    """How many checkpoints the run has stored (``len(history(run_id))``)."""
    usage: Usage
    """Cumulative usage of the run (the latest checkpoint's)."""
    created_at: int
    """``created_at`` of the run's first checkpoint, epoch milliseconds."""
    updated_at: int
    """``created_at`` of the run's latest checkpoint, epoch milliseconds."""
    agent_path: tuple[str, ...] = ()
    """The latest checkpoint's agent path (empty for a top-level run)."""
    pending_approval_count: int = 0
    """How many approvals the latest checkpoint waits for."""
    finish_reason: str | None = None
    """The latest checkpoint's finish reason, if any."""
    forked_from: ForkPoint | None = None
    """The checkpoint of another run this run was forked from, if it is a fork."""

    @classmethod
    def from_infos(cls, first: CheckpointInfo, latest: CheckpointInfo, count: int) -> RunRecord:
        """Build a record from a run's first and latest checkpoint metadata."""
        return latest_record(latest, step_count=count, created_at=first.created_at)


def latest_record(latest: CheckpointInfo, *, step_count: int, created_at: int) -> RunRecord:
    """The record of a run whose latest checkpoint is ``latest``, created at ``created_at``."""
    return RunRecord(
        run_id=latest.run_id,
        status=latest.status,
        step_index=latest.step_index,
        step_count=step_count,
        usage=latest.usage,
        created_at=created_at,
        updated_at=latest.created_at,
        agent_path=latest.agent_path,
        pending_approval_count=len(latest.pending_approvals),
        finish_reason=latest.finish_reason,
        forked_from=latest.forked_from,
    )
