"""A janitor whose one ``drop_table`` call waits for a verdict, and a run of it parked there."""

from __future__ import annotations

from typing import Any

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime


def gated(ran: list[str], table: str = "stg", **agent_options: Any) -> Agent:
    """Agent ``janitor`` (v1): one gated ``drop_table(table)`` call, then ``done``.

    ``ran`` collects the tables the tool dropped; ``agent_options`` go to ``Agent``
    (``approvers=``, ...).
    """

    @nd.tool(needs_approval=True)
    def drop_table(name: str) -> str:
        """Drop a table."""
        ran.append(name)
        return f"dropped {name}"

    return Agent(
        "janitor",
        nd.ScriptedModel([nd.Turn.call("drop_table", name=table), "done"]),
        [drop_table],
        version="1",
        **agent_options,
    )


async def parked(rt: DurableRuntime) -> tuple[nd.runtime.Run, nd.ToolApprovalRequest]:
    """A janitor run submitted to ``rt`` and waiting on its one approval."""
    run = await rt.submit("janitor", "Clean up.")
    await run.wait("waiting_approval")
    [request] = await run.pending_approvals()
    return run, request
