"""The versioned checkpoint a durable run saves at every step boundary."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from ..history import History
from ..messages import FrozenModel, ToolApprovalRequest, Usage

__all__ = [
    "CHECKPOINT_VERSION",
    "AgentCheckpoint",
    "CheckpointInfo",
    "CheckpointStatus",
    "ForkPoint",
    "StepStats",
]

CHECKPOINT_VERSION = 1

CheckpointStatus = Literal["running", "suspended", "completed"]


class ForkPoint(FrozenModel):
    """Where a forked run branched off: a checkpoint of another run."""

    run_id: str
    """The run it was forked from."""
    step_index: int
    """The step of that run whose checkpoint the fork starts from."""
    edited: bool = False
    """Whether the fork replaced the last message of that checkpoint."""


class StepStats(FrozenModel):
    """What one step did and where its time went, as the driver that ran it saw it."""

    started_at: int
    """Epoch ms when the step's first operation began."""
    model_ms: int = 0
    """Milliseconds spent waiting for the model (all attempts)."""
    tool_ms: int = 0
    """Milliseconds spent running tools (a parallel batch counts once, wall time)."""
    tool_calls: tuple[str, ...] = ()
    """Names of the tool calls the model made in this step, in order."""


class AgentCheckpoint(FrozenModel):
    """A full logical snapshot of a run at one step boundary.

    Optional fields may be added without a version bump; a change of meaning
    bumps ``version``.
    """

    version: Literal[1] = 1
    """Schema version; readers refuse versions they do not know."""
    run_id: str
    """Stable id of the run, the same across every suspend/resume leg."""
    step_id: str = ""
    """``f"{run_id}#{step_index}"``; filled in when omitted."""
    step_index: int
    """0-based index of the step that just completed; only grows across legs."""
    status: CheckpointStatus
    """``running`` (the loop went on), ``suspended`` (waiting for approvals or
    client tools) or ``completed`` (final text, stop condition or runaway guard)."""
    messages: History
    """The full, immutable history at this boundary (a tuple or list of messages
    is accepted and becomes a History; it serializes as a list, as before)."""
    usage: Usage = Usage()
    """Cumulative usage over the whole run, all legs included."""
    pending_approvals: tuple[ToolApprovalRequest, ...] = ()
    """Gated calls awaiting a verdict (set on a suspended approval break); each
    carries its signed token when the run had an approval signer."""
    agent_path: tuple[str, ...] = ()
    """Sub-agent names down to the agent that wrote this checkpoint; empty at top level."""
    created_at: int
    """``deps.clock.now()`` at save time, in epoch milliseconds."""
    finish_reason: str | None = None
    """Optional: why the run ended or stopped (``stop``, ``max_steps``, ``suspended``...)."""
    forked_from: ForkPoint | None = None
    """Optional: the checkpoint this run was forked from (every checkpoint of a fork
    carries it, so the run's lineage survives resumes)."""
    stats: StepStats | None = None
    """Optional: model and tool time and the tool calls of the step that ended here
    (None when the checkpoint was written without running a step, e.g. a fork's first)."""

    @model_validator(mode="after")
    def _check_step_id(self) -> AgentCheckpoint:
        expected = f"{self.run_id}#{self.step_index}"
        if not self.step_id:
            object.__setattr__(self, "step_id", expected)
        elif self.step_id != expected:
            raise ValueError(f"step_id must be {expected!r}, got {self.step_id!r}")
        if self.step_index < 0:
            raise ValueError("step_index must be >= 0")
        return self

    def info(self) -> CheckpointInfo:
        """Metadata of this checkpoint, without its messages."""
        fields = {n: getattr(self, n) for n in CheckpointInfo.model_fields if n != "message_count"}
        return CheckpointInfo(**fields, message_count=len(self.messages))


class CheckpointInfo(FrozenModel):
    """A checkpoint's metadata, as ``history(run_id)`` lists it (no messages)."""

    run_id: str
    step_id: str
    step_index: int
    status: CheckpointStatus
    usage: Usage
    message_count: int
    pending_approvals: tuple[ToolApprovalRequest, ...] = ()
    agent_path: tuple[str, ...] = ()
    created_at: int
    finish_reason: str | None = None
    forked_from: ForkPoint | None = None
    stats: StepStats | None = None
