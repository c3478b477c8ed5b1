"""Agents of the cluster benchmark and the PostgreSQL scaling tests: zero-latency, N steps.

``chain`` makes 20 tool calls then answers (21 model steps); ``other`` is an
agent no test worker serves (its runs stay pending: the unserved backlog).
"""

from __future__ import annotations

import nbdurable as nd
from nbdurable.runtime import Agent

STEPS = 21


@nd.tool
async def tick(n: int) -> str:
    """Count one step (safe to re-run)."""
    return f"tick {n}"


def _script(steps: int) -> nd.ScriptedModel:
    turns: list[nd.Turn | str] = [nd.Turn.call("tick", n=i) for i in range(1, steps)]
    return nd.ScriptedModel([*turns, "done"])


chain = Agent(
    "chain",
    _script(STEPS),
    [tick],
    version="1",
    max_steps=STEPS + 4,
    tool_recovery={"tick": "safe"},
)

other = Agent("other", nd.ScriptedModel(["never"]), [], version="1")

agents = [chain]
"""What a benchmark worker serves (``--agents support.cluster_agents:agents``)."""
