"""The agents the AG-UI tests add to the bridge's: one whose gated tool allows edits."""

from __future__ import annotations

import nbdurable as nd
from nbdurable.models._base import ModelRequest

from . import agents as test_agents


@nd.tool(needs_approval=True, allow_edit=True)
def archive_table(name: str, days: int = 30) -> str:
    """Archive a warehouse table, keeping ``days`` of history."""
    return f"archived {name} ({days} days)"


def _read_result(request: ModelRequest) -> str:
    [result] = request.messages[-1].tool_results
    return f"Read: {result.result}"


def editable_agents() -> list[nd.Agent]:
    """The served agents, plus one whose gated tool allows edits."""
    archivist = nd.Agent(
        "archivist",
        nd.ScriptedModel([nd.Turn.call("archive_table", "Archiving.", name="stg"), _read_result]),
        [archive_table],
        version="1",
    )
    return [*test_agents.agents(), archivist]
