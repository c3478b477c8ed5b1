"""Two definitions of agent ``cleaner`` v1, for Temporal workers that disagree about it.

``cleaner_x`` is the one runs are submitted with (a ``manual`` tool, then its
text); ``cleaner_y`` has the same id and version but another script and tool;
``cleaner_x_unstreamed`` is ``cleaner_x`` registered with ``stream=False``, the
same definition (a run streams as captured at its submission). The tools record their executions in temporal_agents' side table (with the pid).
``releaser_v1`` and ``releaser_v2`` are two releases of agent ``releaser`` v1 (a
gated tool, then a text that differs), for rolling upgrades of versioned workers.
"""

from __future__ import annotations

from dataclasses import replace

import nbdurable as nd
from nbdurable.runtime import Agent
from support.temporal_agents import _count


@nd.tool
def sweep(table: str, ctx: nd.ToolContext) -> str:
    """Sweep a staging table."""
    _count(ctx, "sweep")
    return f"swept {table}"


@nd.tool
def vacuum(name: str, ctx: nd.ToolContext) -> str:
    """Vacuum a database."""
    _count(ctx, "vacuum")
    return f"vacuumed {name}"


cleaner_x = [
    Agent(
        "cleaner",
        nd.ScriptedModel([nd.Turn.call("sweep", table="stg_a"), "Cleaner X swept stg_a."]),
        tools=[sweep],
        version="1",
        tool_recovery={"sweep": "manual"},
    )
]
cleaner_y = [
    Agent(
        "cleaner",
        nd.ScriptedModel([nd.Turn.call("vacuum", name="public"), "Cleaner Y vacuumed."]),
        tools=[vacuum],
        version="1",
    )
]
cleaner_x_unstreamed = [replace(cleaner_x[0], stream=False)]


@nd.tool(needs_approval=True)
def release(name: str, ctx: nd.ToolContext) -> str:
    """Release a build (a human approves it)."""
    _count(ctx, "release")
    return f"released {name}"


def _releaser(text: str) -> Agent:
    return Agent(
        "releaser",
        nd.ScriptedModel([nd.Turn.call("release", name="b1"), text]),
        tools=[release],
        version="1",
    )


releaser_v1 = [_releaser("Released b1 (release one).")]
"""The releaser as the first release defines it: runs park on ``release``'s approval."""
releaser_v2 = [_releaser("Released b1 (release two).")]
"""The releaser of the next release: same id and version, another definition."""
