"""The runs dashboard's approvals are the inbox's pending rows, decided through the runtime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.inspect._approvals import approval_rows
from nbdurable.notebook.widgets import RunsDashboard

from .widget_fixtures import (
    SECRET,
    drop_table,
    eventually,
    front_end_sends,
    janitor,
    runtime_for,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def pair() -> nd.Agent:
    """Asks to drop two tables in one step: two approvals at once."""
    model = nd.ScriptedModel(
        [
            nd.Turn(
                tool_calls=[
                    {"name": "drop_table", "args": {"name": "a"}, "id": "c1"},
                    {"name": "drop_table", "args": {"name": "b"}, "id": "c2"},
                ]
            ),
            "Dropped what I could.",
        ]
    )
    return nd.Agent("pair", model, [drop_table], version="1")


def lead() -> nd.Agent:
    """Delegates to a sub-agent whose call is gated."""
    coder = nd.agent_tool(
        "coder",
        model=nd.ScriptedModel([nd.Turn.call("drop_table", name="tmp"), "coder done"]),
        tools=[drop_table],
    )
    model = nd.ScriptedModel(
        [
            nd.Turn(tool_calls=[{"name": "coder", "args": {"prompt": "go"}, "id": "call_1_0"}]),
            "all done",
        ]
    )
    return nd.Agent("lead", model, [coder], version="1", tool_recovery={"coder": "safe"})


class _Epoch:
    def now(self) -> int:
        return 0


async def test_the_dashboard_shows_the_inboxs_pending_rows_and_decides_them(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, janitor(), pair(), lead()) as runtime:
        runs = [
            await runtime.submit("janitor", "Clean up.", run_id="one"),
            await runtime.submit("pair", "Drop a and b.", run_id="two"),
            await runtime.submit("lead", "Delegate.", run_id="sub"),
        ]
        for run in runs:
            await run.wait("waiting_approval")
        dashboard = RunsDashboard(runtime, refresh_interval=0.05)
        inbox = approval_rows(runtime.store, status="pending")
        shown = dashboard.view.approvals
        assert sorted((a["run_id"], a["approval_id"], a["requested_at"]) for a in shown) == sorted(
            (r["run_id"], r["approval_id"], r["requested_at"]) for r in inbox
        )
        assert len(shown) == 4 and {a["token_expired"] for a in shown} == {False}
        sub = next(a for a in shown if a["run_id"] == "sub")
        assert sub["agent"] == "lead \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} coder"
        assert sub["call"] == 'drop_table(name="tmp")'
        state = json.dumps(dashboard.view.get_state())
        assert "v1." not in state and SECRET not in state  # no token, no secret in the view

        first, second = (a for a in shown if a["run_id"] == "two")
        front_end_sends(
            dashboard.view,
            {
                "type": "deny",
                "run_id": "two",
                "approval_id": first["approval_id"],
                "reason": "no",
            },
        )
        front_end_sends(
            dashboard.view,
            {"type": "approve", "run_id": "sub", "approval_id": sub["approval_id"]},
        )
        await dashboard.settled()
        outcomes = {a["approval_id"]: a["state"] for a in dashboard.view.approvals}
        assert outcomes[first["approval_id"]] == "denied"
        assert outcomes[sub["approval_id"]] == "approved"
        assert (await runs[2].result()).text == "all done"
        every = {r["approval_id"]: r for r in approval_rows(runtime.store)}
        assert every[first["approval_id"]]["status"] == "denied"
        assert every[first["approval_id"]]["reason"] == "no"
        assert every[sub["approval_id"]]["status"] == "approved"
        assert every[second["approval_id"]]["status"] == "pending"
        # the rest stays listed, as the inbox lists it
        await dashboard.refreshed()
        still = [a["approval_id"] for a in dashboard.view.approvals if a["state"] == "pending"]
        assert sorted(still) == sorted(
            r["approval_id"] for r in approval_rows(runtime.store, status="pending")
        )
        dashboard.close()
        for run in runs[:2]:
            await run.cancel()


async def test_a_request_past_the_max_age_is_marked_and_approve_signs_a_fresh_token(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        runtime.signer.clock = _Epoch()  # the request is signed with issued_at=0
        run = await runtime.submit("janitor", "Clean up.", run_id="old")
        await run.wait("waiting_approval")
        runtime.signer.clock = nd.ApprovalSigner(SECRET).clock
        dashboard = RunsDashboard(runtime, refresh_interval=0.05)
        [row] = dashboard.view.approvals
        assert row["token_expired"] is True and row["state"] == "pending"
        [inbox] = approval_rows(runtime.store, max_age_ms=runtime.approval_max_age_ms)
        assert inbox["status"] == "expired"
        front_end_sends(
            dashboard.view,
            {"type": "approve", "run_id": "old", "approval_id": row["approval_id"]},
        )
        await dashboard.settled()
        await eventually(lambda: dashboard.view.approvals[0]["state"] == "approved")
        assert (await run.result()).text == "Done: dropped stg_2023."
        dashboard.close()
