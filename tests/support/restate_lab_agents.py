"""The seed's Restate lab agent: one journaled tool step, then a long streamed answer.

The answer streams one token every 50 ms, so a test SIGKILLs the endpoint in the
middle of it. The tool counts its executions (support.temporal_agents' side table).
"""

from __future__ import annotations

import nbdurable as nd
from nbdurable.runtime import Agent
from support.temporal_agents import step

ANSWER = " ".join(f"token{i}" for i in range(80))

agents = [
    Agent(
        "lab",
        model=nd.ScriptedModel([nd.Turn.call("step", n=1), ANSWER], stream_delay=0.05),
        tools=[step],
        version="1",
        tool_recovery={"step": "safe"},
        stream=True,
    )
]
