"""A gated call inside a sub-agent of a runtime run.

The request shown on the parent run carries a token bound to the parent's run id,
so the checked verdict path (the widget's card, the HTTP bridge) accepts it, and
a token bound to the child's key (runs suspended before) is still honoured.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.lead_agents import lead_with_coder

from nbdurable.runtime import DurableRuntime
from nbdurable.runtime._checked_verdicts import submit_verdict


@pytest.mark.spec("S000-52")
@pytest.mark.parametrize("bound_to", ["parent", "child key"])
async def test_a_sub_agents_request_is_approved_through_the_checked_verdict_path(
    store: Any, bound_to: str
) -> None:
    ran: list[str] = []
    async with await DurableRuntime.open(store=store, agents=[lead_with_coder(ran)]) as rt:
        run = await rt.submit("lead", "Have the coder test it.")
        await run.wait("waiting_approval")
        [request] = await run.pending_approvals()
        assert request.agent_path == ("coder",)
        payload = rt.signer.verify(request.token)
        assert payload is not None
        assert payload["run_id"] == run.run_id  # what the bridge and the card check
        token = request.token
        if bound_to == "child key":  # signed the way runs suspended before were
            unsigned = request.model_copy(update={"token": None})
            token = rt.signer.sign(unsigned, run_id=f"{run.run_id}::coder#call_1_0")
        outcome = await submit_verdict(
            rt, run.run_id, request.approval_id, approve=True, token=token
        )
        assert outcome.state == "approved", outcome
        result = await asyncio.wait_for(run.result(), 10)
    assert ran == ["pytest"]
    assert result.text == "all done"
