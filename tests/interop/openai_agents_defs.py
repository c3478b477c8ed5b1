"""An OpenAI Agents SDK agent (the real package) run durably, for tests and `nbdurable worker`.

The SDK ships no fake model, so the agent runs on nbdurable's ``ScriptedModel`` in
history mode: the turn played follows the conversation, so a run resumed in another
process gets the right next turn. Every ``drop_table`` execution appends a line to the
file named by NBDURABLE_TEST_LOG (O_APPEND, fsync'd).
"""

from __future__ import annotations

import agents as sdk
from agents.tool_context import ToolContext
from pydantic import BaseModel
from support.runtime_agents import _log as log_line  # appends a line to NBDURABLE_TEST_LOG

import nbdurable as nd

CALL_ID = "call_1_0"
"""The id ScriptedModel gives the first turn's call."""


class Cleanup(BaseModel):
    """What the janitor reports."""

    dropped: list[str]


@sdk.function_tool(needs_approval=True)
def drop_table(ctx: ToolContext[None], name: str) -> str:
    """Drop a warehouse table.

    Args:
        name: The table to drop.
    """
    log_line(f"drop {ctx.tool_call_id} {name}")
    return f"dropped {name}"


janitor = sdk.Agent(
    name="janitor",
    instructions="You clean up stale staging tables.",
    tools=[drop_table],
    output_type=Cleanup,
)

model = nd.ScriptedModel(
    [
        nd.Turn.call("drop_table", name="stg_2023"),
        '{"dropped": ["stg_2023"]}',
    ]
)

agents = [  # what `nbdurable worker --agents` reads
    nd.Agent.from_openai_agents(
        janitor, model=model, version="1", tool_recovery={"drop_table": "manual"}
    )
]
