"""An agent whose tool call a kernel dies in, and that kernel as a function for a subprocess.

Both the test's process (the restarted kernel) and the subprocess (the kernel that
is killed) import this module under the same name, so they define the same agent.
"""

from __future__ import annotations

import asyncio
import os

import nbdurable as nd

DIES_IN_TOOL = "NBDURABLE_TEST_KERNEL_DIES_IN_TOOL"
"""Set to 1 in the kernel that is killed: its tool call never returns."""


@nd.tool
async def charge(amount: int) -> str:
    """Charge a card (never run twice without a human: its recovery is manual)."""
    if os.environ.get(DIES_IN_TOOL) == "1":
        print("in the tool", flush=True)
        await asyncio.Event().wait()
    return f"charged {amount}"


def biller() -> nd.Agent:
    """Charges once, then says so."""
    model = nd.ScriptedModel([nd.Turn.call("charge", "Charging the card.", amount=5), "Charged 5."])
    return nd.Agent("biller", model, [charge], version="1")


def old_kernel(url: str, run_id: str, lease_ms: int) -> None:
    """Submit a run of ``biller`` and execute it until the process is killed mid-tool."""

    async def main() -> None:
        store = nd.open_store(url)
        runtime = await nd.DurableRuntime.open(store=store, agents=[biller()], lease_ms=lease_ms)
        await runtime.submit("biller", "Charge 5.", run_id=run_id)
        await asyncio.Event().wait()

    asyncio.run(main())
