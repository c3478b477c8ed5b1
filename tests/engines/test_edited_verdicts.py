"""Every engine: an approval with edited arguments runs them, and a reply settles the call.

The verdict travels with the run record's verdicts to whichever engine executes
the run (an embedded worker process, a Temporal workflow, a Restate invocation);
the worker's tool gets the edited arguments (its result says which table it
dropped), and a reply settles the call without the tool running.
"""

from __future__ import annotations

import asyncio

from support.executions import tool_rows

from .conftest import EngineCase


async def test_an_edit_runs_edited_and_a_reply_settles_on_every_engine(
    engine: EngineCase,
) -> None:
    engine.worker()
    async with engine.client() as rt:
        edited = await rt.submit("editor", "Clean up.")
        replied = await rt.submit("editor", "Clean up, again.")
        for run in (edited, replied):
            await asyncio.wait_for(run.wait("waiting_approval"), 60)
        [request] = await edited.pending_approvals()
        assert request.allow_edit and request.input == {"name": "stg"}
        await edited.approve(request.approval_id, arguments={"name": "stg_2023"}, by="ana")
        await replied.respond(None, "keep it", by="lee")
        edited_text = (await asyncio.wait_for(edited.result(), 60)).text
        replied_text = (await asyncio.wait_for(replied.result(), 60)).text
    assert edited_text == "read: dropped stg_2023"
    assert replied_text == "read: keep it"
    assert [tool for tool, _pid in tool_rows(engine.tools)] == ["edit_table"]  # once, edited
    decision = edited.record().decided[request.approval_id]
    assert (decision.kind, decision.original_arguments) == ("edited", {"name": "stg"})
    [call] = [c for m in engine.store.load(edited.run_id).messages for c in m.tool_calls]
    assert call.args == {"name": "stg_2023"}
