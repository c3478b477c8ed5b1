"""A checkpoint's row: the columns its encoders write, in COLUMNS order, read back whole."""

from __future__ import annotations

import json

import pytest

import nbdurable as nd
from nbdurable.durable._checkpoint import AgentCheckpoint, ForkPoint, StepStats
from nbdurable.messages import ToolApprovalRequest
from nbdurable.stores._rows import COLUMNS, CheckpointRow, checkpoint_row


def checkpoints() -> list[AgentCheckpoint]:
    usage = nd.Usage(input_tokens=3, output_tokens=2, total_tokens=5, cost=0.5)
    request = ToolApprovalRequest(
        approval_id="a1", tool_call_id="c1", tool_name="drop", input={"name": "é"}, token="v1.x"
    )
    base = AgentCheckpoint(
        run_id="r", step_index=2, status="running", messages=(), created_at=7, usage=usage
    )
    return [
        base,
        base.model_copy(update={"stats": StepStats(started_at=5, tool_calls=("probe",))}),
        base.model_copy(update={"stats": StepStats(started_at=5, model_ms=3, tool_ms=1)}),
        base.model_copy(
            update={
                "status": "suspended",
                "pending_approvals": (request,),
                "agent_path": ("outer", "inner"),
                "finish_reason": "suspended",
                "forked_from": ForkPoint(run_id="p", step_index=1),
            }
        ),
    ]


@pytest.mark.parametrize("checkpoint", checkpoints(), ids=["plain", "calls", "times", "full"])
def test_a_row_holds_what_the_encoders_write_and_reads_back(checkpoint: AgentCheckpoint) -> None:
    row = checkpoint_row(checkpoint)
    assert row.values() == tuple(getattr(row, name) for name in COLUMNS)
    assert row.pending_approvals == json.dumps(
        [r.model_dump(mode="json") for r in checkpoint.pending_approvals],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert json.loads(row.agent_path) == list(checkpoint.agent_path)
    assert row.agent_path == json.dumps(list(checkpoint.agent_path))
    extra = checkpoint.model_dump_json(include={"stats", "forked_from"}, exclude_defaults=True)
    assert row.extra == (None if extra == "{}" else extra)
    back = CheckpointRow.from_values("r", row.values()).checkpoint(())
    assert back == checkpoint
