"""Edits and replies on the Temporal engine: the edited arguments reach the tool activity.

The verdict travels to the workflow with the run record's verdicts (the
``resume`` signal); the machine runs the call with the edited arguments, so
the ``nbdurable.run_tool`` activity of a worker process gets them; a reply
settles the call without any activity.
"""

from __future__ import annotations

import asyncio
import sqlite3

from .conftest import Cluster


def _tool_runs(cluster: Cluster, run_id: str) -> int:
    if not cluster.tools.exists():
        return 0
    db = sqlite3.connect(cluster.tools)
    try:
        [(count,)] = db.execute(
            "SELECT count(*) FROM runs WHERE run_id = ? AND tool = 'edit_table'", (run_id,)
        ).fetchall()
    finally:
        db.close()
    return int(count)


async def test_an_edited_call_runs_edited_and_a_reply_settles_on_temporal(
    cluster: Cluster,
) -> None:
    cluster.worker()
    store = cluster.store
    async with cluster.runtime(heartbeat_timeout=2) as rt:
        edited = await rt.submit("editor", "Clean up.")
        replied = await rt.submit("editor", "Clean up, again.")
        for run in (edited, replied):
            await asyncio.wait_for(run.wait("waiting_approval"), 30)
        [request] = await edited.pending_approvals()
        assert request.allow_edit and request.parameters is not None
        await edited.approve(arguments={"name": "stg_2023"}, by="ana")
        [answered] = await replied.pending_approvals()
        await replied.respond(answered.approval_id, "keep it", by="lee")
        edited_result = await asyncio.wait_for(edited.result(), 30)
        replied_result = await asyncio.wait_for(replied.result(), 30)
    # the activity of the worker process ran the edited call (its result says so)
    assert edited_result.text == "read: dropped stg_2023"
    assert _tool_runs(cluster, edited.run_id) == 1
    decision = edited.record().decided[request.approval_id]
    assert (decision.kind, decision.arguments) == ("edited", {"name": "stg_2023"})
    assert decision.original_arguments == {"name": "stg"}
    messages = store.load(edited.run_id).messages
    [call] = [c for m in messages for c in m.tool_calls]
    assert call.args == {"name": "stg_2023"}
    [resolved] = [e for e in store.read_events(edited.run_id) if e.type == "approval_resolved"]
    assert resolved.payload["arguments"] == {"name": "stg_2023"}
    assert resolved.payload["original_arguments"] == {"name": "stg"}
    # the reply: no activity ran the tool; the model read the reply as the result
    assert replied_result.text == "read: keep it"
    assert _tool_runs(cluster, replied.run_id) == 0
    [result] = [r for m in store.load(replied.run_id).messages for r in m.tool_results]
    assert (result.result, result.is_error) == ("keep it", False)
    assert replied.record().decided[answered.approval_id].kind == "replied"
