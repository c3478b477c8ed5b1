"""An agent with a gated, slow tool, for tests that hand it to `nbdurable worker` processes.

The test's own runtime imports the same definition (same fingerprint), submits the
run and decides its approval; the worker executes it.
"""

from __future__ import annotations

import asyncio

import nbdurable as nd


@nd.tool(needs_approval=True)
async def slow_drop(name: str) -> str:
    """Drop a table, slowly (long enough to be seen running after the approval)."""
    await asyncio.sleep(2.0)
    return f"dropped {name}"


gatekeeper = nd.Agent(
    "gatekeeper",
    nd.ScriptedModel([nd.Turn.call("slow_drop", name="stg_2023"), "Done."]),
    [slow_drop],
    version="1",
)

agents = [gatekeeper]
