"""A lead agent whose ``coder`` sub-agent runs a shell command that needs approval."""

from __future__ import annotations

import nbdurable as nd
from nbdurable.runtime import Agent


def lead_with_coder(ran: list[str] | None = None) -> Agent:
    """``lead`` asks its ``coder`` sub-agent to test; the coder's ``run_shell`` waits for approval.

    ``ran``: where the approved commands are appended, when the test counts them.
    """

    @nd.tool(needs_approval=True)
    def run_shell(cmd: str) -> str:
        """Run a shell command."""
        if ran is not None:
            ran.append(cmd)
        return f"ran {cmd}"

    coder = nd.agent_tool(
        "coder",
        model=nd.ScriptedModel([nd.Turn.call("run_shell", cmd="pytest"), "coder done"]),
        tools=[run_shell],
    )
    parent = nd.ScriptedModel(
        [
            nd.Turn(tool_calls=[{"name": "coder", "args": {"prompt": "test"}, "id": "call_1_0"}]),
            "all done",
        ]
    )
    return Agent("lead", parent, [coder], version="1", tool_recovery={"coder": "safe"})
