"""Tools, scripted models and a spy store shared by the checkpoint and session-store tests."""

from __future__ import annotations

from typing import Any

import nbdurable as nd


def usage(n: int, cost: float | None = None) -> nd.Usage:
    return nd.Usage(input_tokens=n, output_tokens=n, total_tokens=2 * n, cost=cost)


def make_tools(log: list[str]) -> list[nd.Tool]:
    """A fresh set of tools (a new "process"), recording every execution in ``log``."""

    @nd.tool
    def lookup(key: str) -> str:
        """Look a key up."""
        log.append(f"lookup:{key}")
        return f"value of {key}"

    @nd.tool(needs_approval=True)
    def drop_table(name: str) -> str:
        """Drop a warehouse table."""
        log.append(f"drop:{name}")
        return f"dropped {name}"

    return [lookup, drop_table]


def three_step_model(events: list[str] | None = None, **kwargs: Any) -> nd.ScriptedModel:
    """Step 0 and 1 call ``lookup``, step 2 answers. Each model call is logged to ``events``."""
    turns = [
        nd.Turn(text="step zero", tool_calls=[("lookup", {"key": "a"})], usage=usage(1)),
        nd.Turn(text="step one", tool_calls=[("lookup", {"key": "b"})], usage=usage(2)),
        nd.Turn(text="all done", usage=usage(3)),
    ]
    if events is None:
        return nd.ScriptedModel(turns, **kwargs)

    def logged(turn: nd.Turn) -> Any:
        def entry(request: nd.ModelRequest) -> nd.Turn:
            events.append("model")
            return turn

        return entry

    return nd.ScriptedModel([logged(t) for t in turns], **kwargs)


def approval_model(*, keep_requests: int | None = 0) -> nd.ScriptedModel:
    """Step 0 looks up, step 1 makes a gated call, step 2 answers."""
    return nd.ScriptedModel(
        [
            nd.Turn(text="looking", tool_calls=[("lookup", {"key": "a"})], usage=usage(1)),
            nd.Turn(text="dropping", tool_calls=[("drop_table", {"name": "stg"})], usage=usage(2)),
            nd.Turn(text="finished", usage=usage(3)),
        ],
        keep_requests=keep_requests,
    )


class SpyStore:
    """A minimal sync store: only ``save`` and ``load``; records every call."""

    def __init__(self, events: list[str] | None = None) -> None:
        self.saved: list[nd.AgentCheckpoint] = []
        self.loads: list[str] = []
        self.events = events

    def save(self, checkpoint: nd.AgentCheckpoint) -> None:
        if self.events is not None:
            self.events.append(f"save:{checkpoint.step_index}:{checkpoint.status}")
        self.saved.append(checkpoint)

    def load(self, run_id: str) -> nd.AgentCheckpoint | None:
        self.loads.append(run_id)
        mine = [c for c in self.saved if c.run_id == run_id]
        return mine[-1] if mine else None


async def drain(stream: nd.StreamChatResult) -> list[Any]:
    return [part async for part in stream.full_stream]


def approve(request: nd.ToolApprovalRequest) -> nd.ToolApprovalResponse:
    return nd.ToolApprovalResponse(approval_id=request.approval_id, approved=True)
