"""Approval cards: the click's round trip, token checks, no double approvals, denials, the secret."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from ipywidgets import Widget

import nbdurable as nd
from nbdurable import events as ev
from nbdurable.notebook.widgets import HistoryBrowser, RunsDashboard, RunWidget

from .widget_fixtures import (  # noqa: F401
    SECRET,
    comms_fixture,
    eventually,
    front_end_sends,
    janitor,
    runtime_for,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def waiting_view(runtime: Any) -> tuple[nd.runtime.Run, RunWidget, dict[str, Any]]:
    """A submitted janitor run waiting for its approval, its view and the pending card."""
    run = await runtime.submit("janitor", "Clean up the staging tables.")
    await run.wait("waiting_approval")
    widget = RunWidget(runtime, run.run_id)
    await eventually(lambda: [c["state"] for c in widget.approvals] == ["pending"])
    return run, widget, widget.approvals[0]


def click(widget: RunWidget, card: dict[str, Any], action: str, **changes: Any) -> None:
    content = {"type": action, "approval_id": card["approval_id"], "token": card["token"]}
    front_end_sends(widget, {**content, "reason": None, **changes})


def resolved(runtime: Any, run_id: str) -> list[ev.Event]:
    return [e for e in runtime.store.read_events(run_id) if e.type == ev.APPROVAL_RESOLVED]


async def test_approve_from_the_card_resumes_and_completes_the_run(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run, widget, card = await waiting_view(runtime)
        assert card["tool_name"] == "drop_table" and card["args"] == {"name": "stg_2023"}
        assert card["agent_path"] == [] and card["requested_at"] > 0
        assert runtime.signer.verify(card["token"])["approval_id"] == card["approval_id"]
        click(widget, card, "approve")
        assert widget.approvals[0]["state"] == "sending"  # disabled at once
        await widget.settled()
        assert widget.approvals[0]["state"] == "approved"
        result = await run.result()
        await eventually(lambda: widget.status == "completed" and not widget.following)
        assert [e.payload["approved"] for e in resolved(runtime, run.run_id)] == [True]
    assert result.text == "Done: dropped stg_2023."
    assert widget.approvals[0]["state"] == "approved"


@pytest.mark.parametrize(
    "forge",
    [
        lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),  # the MAC altered
        lambda t: "v1." + t.split(".")[1][:-4] + "abcd." + t.split(".")[2],  # payload altered
        lambda t: "",
        lambda t: None,
    ],
    ids=["mac", "payload", "empty", "missing"],
)
async def test_an_altered_token_leaves_the_run_waiting_and_the_card_says_so(
    tmp_path: Path, forge: Any
) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run, widget, card = await waiting_view(runtime)
        click(widget, card, "approve", token=forge(card["token"]))
        await widget.settled()
        assert widget.approvals[0]["state"] == "invalid token"
        assert "invalid token" in widget.approvals[0]["message"]
        record = run.record()
        assert record.state == "waiting_approval" and record.verdicts == {}
        assert resolved(runtime, run.run_id) == []
        click(widget, card, "approve")  # the genuine token still works afterwards
        await widget.settled()
        assert (await run.result()).text == "Done: dropped stg_2023."


async def test_a_token_of_another_approval_or_run_is_refused(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run_a, view_a, card_a = await waiting_view(runtime)
        run_b, view_b, card_b = await waiting_view(runtime)
        click(view_a, card_a, "approve", token=card_b["token"])  # validly signed, wrong run
        await view_a.settled()
        assert view_a.approvals[0]["state"] == "invalid token"
        assert run_a.record().state == "waiting_approval" and run_a.record().verdicts == {}
        click(view_b, card_b, "approve")
        await view_b.settled()
        await run_b.result()
        assert run_a.status == "waiting_approval"


async def test_a_second_click_never_approves_twice(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run, widget, card = await waiting_view(runtime)
        calls: list[Any] = []
        store = runtime.runtime_store
        original = store.rt_verdict

        def counting(*args: Any, **kwargs: Any) -> Any:
            stored, recorded = original(*args, **kwargs)
            if recorded:
                calls.append(args)
            return stored, recorded

        store.rt_verdict = counting
        try:
            click(widget, card, "approve")
            click(widget, card, "approve")  # while the first is being checked
            await widget.settled()
            click(widget, card, "approve")  # after it was recorded
            click(widget, card, "deny", reason="changed my mind")
            await widget.settled()
            await run.result()
            click(widget, card, "approve")  # after the run completed
            await widget.settled()
        finally:
            del store.rt_verdict
        assert [e.payload["approved"] for e in resolved(runtime, run.run_id)] == [True]
    assert len(calls) == 1
    assert widget.approvals[0]["state"] == "approved"


@pytest.mark.parametrize("elsewhere", ["another view", "the runtime API"])
async def test_a_stale_card_never_approves_again(tmp_path: Path, elsewhere: str) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run, stale, card = await waiting_view(runtime)
        stale.close()  # e.g. an old output whose view no longer follows the run
        if elsewhere == "another view":
            fresh = RunWidget(runtime, run.run_id)
            await eventually(lambda: bool(fresh.approvals))
            click(fresh, fresh.approvals[0], "approve")
            await fresh.settled()
        else:
            await run.approve(card["approval_id"])  # what `%durable approve` / the CLI do
        # the stale card's click comes in before or after the run went on: never again;
        # a denial loses to the recorded approval, the same approval is the original success
        click(stale, card, "deny")
        await stale.settled()
        assert stale._cards.outcomes[card["approval_id"]] == (
            "approved",
            "already approved elsewhere",
        )
        await run.result()
        stale._cards.outcomes.clear()
        click(stale, card, "approve")
        await stale.settled()
        assert stale._cards.outcomes[card["approval_id"]][0] == "approved"
        assert len(resolved(runtime, run.run_id)) == 1


async def test_deny_with_a_reason_reaches_the_model(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run, widget, card = await waiting_view(runtime)
        click(widget, card, "deny", token=None, reason="not on a Friday")
        await widget.settled()
        assert widget.approvals[0]["state"] == "denied"
        assert widget.approvals[0]["message"] == (
            "denied: not on a Friday; the run resumes here (this kernel serves janitor v1)"
        )
        result = await run.result()
        await eventually(lambda: widget.status == "completed" and not widget.following)
    results = [p for m in result.messages if m.role == "tool" for p in m.content if p.is_error]
    assert [p.result for p in results] == ["not on a Friday"]
    drop = widget.steps[1]["tool_calls"][0]
    assert drop["is_error"] and drop["result"] == "not on a Friday"


async def test_the_secret_never_reaches_widget_state_or_a_saved_notebook(tmp_path: Path) -> None:
    import nbformat

    async with runtime_for(tmp_path, janitor()) as runtime:
        run, widget, card = await waiting_view(runtime)
        dashboard = RunsDashboard(runtime)
        await dashboard.show(run.run_id)
        browser = HistoryBrowser(runtime, run.run_id)
        click(widget, card, "approve", token=card["token"][:-1] + "x")
        await widget.settled()
        states = {w.model_id: w.get_state() for w in (widget, dashboard, browser)}
        manager = Widget.get_manager_state()
        click(widget, card, "approve")
        await widget.settled()
        await run.result()
        await eventually(lambda: not widget.following)
        manager_after = Widget.get_manager_state()
    dumped = json.dumps([states, manager, manager_after], default=str)
    assert card["token"] in dumped  # the signed token is there (it is what a card holds)
    assert SECRET not in dumped
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": manager_after}
    view = {"model_id": widget.model_id, "version_major": 2, "version_minor": 0}
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "RunWidget(runtime, run_id)",
            outputs=[
                nbformat.v4.new_output(
                    "display_data", data={"application/vnd.jupyter.widget-view+json": view}
                )
            ],
        )
    )
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, path)
    saved = path.read_text()
    assert widget.model_id in saved and card["approval_id"] in saved
    assert SECRET not in saved


def custom_messages(log: list[Any], widget: RunWidget) -> list[dict[str, Any]]:
    """The custom messages the kernel sent to ``widget``'s front-end, in order (no steps)."""
    return [
        data["content"]
        for _t, comm_id, data in log
        if comm_id == widget.comm.comm_id
        and data.get("method") == "custom"
        and data["content"]["type"] not in ("steps", "snapshot")
    ]


async def test_the_kernel_answers_a_probe_and_acknowledges_every_click_at_once(
    tmp_path: Path, comms: list[Any]
) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run, widget, card = await waiting_view(runtime)
        front_end_sends(widget, {"type": "ping", "nonce": 7})
        assert custom_messages(comms, widget) == [{"type": "pong", "nonce": 7}]
        click(widget, card, "approve")
        # acknowledged before the verdict is checked: the front-end knows a kernel got it
        assert custom_messages(comms, widget)[-1] == {
            "type": "ack",
            "approval_id": card["approval_id"],
        }
        assert widget.approvals[0]["state"] == "sending"
        await widget.settled()
        click(widget, card, "approve")  # a second click is acknowledged, and ignored
        await widget.settled()
        await run.result()
        acks = [m for m in custom_messages(comms, widget) if m["type"] == "ack"]
        assert len(acks) == 2 and len(resolved(runtime, run.run_id)) == 1


async def test_an_answered_card_carries_when_and_why_it_was_decided(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run, widget, card = await waiting_view(runtime)
        before = int(time.time() * 1000)
        click(widget, card, "deny", token=None, reason="not on a Friday")
        await widget.settled()
        answered = widget.approvals[0]
        assert answered["state"] == "denied" and answered["reason"] == "not on a Friday"
        assert before <= answered["decided_at"] <= int(time.time() * 1000)
        await run.result()
        await eventually(lambda: widget.status == "completed" and not widget.following)
        # a view opened later reads the same from the log: when, and the reason
        late = RunWidget(runtime, run.run_id)
        await eventually(lambda: not late.following)
        assert late.approvals[0]["state"] == "denied"
        assert late.approvals[0]["reason"] == "not on a Friday"
        assert abs(late.approvals[0]["decided_at"] - answered["decided_at"]) < 2000
        assert late.summary == "completed"  # not "waiting for approval"

        second = await runtime.submit("janitor", "Clean up again.")
        await second.wait("waiting_approval")
        await second.approve()  # from elsewhere (the API, `%durable approve`, the CLI)
        await second.result()
        view = RunWidget(runtime, second.run_id)
        await eventually(lambda: not view.following)
    (card2,) = view.approvals
    assert card2["state"] == "approved" and card2["decided_at"] > 0 and card2["reason"] == ""
    assert card2["agent_path"] == []  # the front-end shows a path only for a sub-agent


async def test_approve_all_from_the_card_grants_the_tool_and_approves_this_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBDURABLE_USER", "ana")
    async with runtime_for(tmp_path, janitor()) as runtime:
        run, widget, card = await waiting_view(runtime)
        click(widget, card, "grant")
        await widget.settled()
        assert widget.approvals[0]["state"] == "approved"
        await run.result()
        record = run.record()
        [payload] = [e.payload for e in resolved(runtime, run.run_id)]
        log = list(runtime.store.read_events(run.run_id))
    source = payload["source"]
    assert (payload["approved"], source["via"], source["by"]) == (True, "grant", "ana")
    assert record.grants is not None and len(record.grants["tokens"]) == 1
    [added] = [e.payload for e in log if e.type == "grant_added"]
    assert (added["tool"], added["via"], added["granted_by"]) == ("drop_table", "widget", "ana")
    assert added["grant_id"] == source["grant_id"]
