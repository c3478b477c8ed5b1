"""RunsDashboard on real runs (SQLite, a real runtime), driven by the view's messages.

The view's messages are delivered the way the browser sends them (``_handle_msg``
with a custom message); what the kernel sends back is read from the synced traits
and, where it matters, from every message a recording comm saw.
"""

from __future__ import annotations

import asyncio
import html
import json
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.notebook.widgets import HistoryBrowser, RunsDashboard, RunWidget

from .widget_fixtures import (
    SECRET,
    click,
    comms_fixture,  # noqa: F401  (the ``comms`` fixture)
    eventually,
    front_end_sends,
    janitor,
    lookup,
    runtime_for,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

LONG_ERROR = "The warehouse refused the connection: " + "credentials expired for etl; " * 12


def flaky(error: str | None = None) -> nd.Agent:
    """Fails its first model call (no retry policy), then answers."""
    fail: Any = {1: RuntimeError(error)} if error else [1]
    return nd.Agent("flaky", nd.ScriptedModel(["Recovered."], fail_on=fail), [], version="1")


def greeter() -> nd.Agent:
    """Answers at once, no tools, no price."""
    return nd.Agent("greeter", nd.ScriptedModel(["Hello!"]), [], version="1")


def ids(dashboard: RunsDashboard) -> list[str]:
    return [row["id"] for row in dashboard.view.rows]


def ask(dashboard: RunsDashboard, **query: Any) -> None:
    front_end_sends(dashboard.view, {"type": "query", **query})


async def test_the_kernel_sends_one_page_and_pages_sorts_and_filters_many_runs(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, greeter(), janitor()) as runtime:
        for i in range(57):
            await runtime.submit("greeter", f"Hi {i}.", run_id=f"run-{i:02d}")
        waiting = await runtime.submit("janitor", "Clean up.", run_id="run-waits")
        await waiting.wait("waiting_approval")
        await eventually(lambda: len(runtime.list_runs("completed")) == 57)
        dashboard = RunsDashboard(runtime, page_size=25)
        view = dashboard.view
        assert (view.total, view.pages, view.page, len(view.rows)) == (58, 3, 0, 25)
        assert view.counts == {"completed": 57, "waiting_approval": 1}
        assert ids(dashboard)[0] == "run-waits"  # newest first
        assert [c["key"] for c in view.columns] == [
            "run_id", "status", "agent", "steps", "tokens", "cost", "age", "reason",
        ]  # fmt: skip

        ask(dashboard, page=2)
        assert view.page == 2 and ids(dashboard) == [f"run-{i:02d}" for i in range(7, -1, -1)]
        ask(dashboard, page=99)  # past the end: the last page
        assert view.page == 2 and len(view.rows) == 8

        ask(dashboard, sort_by="run_id", descending=False)
        assert view.page == 0 and view.sort_by == "run_id" and not view.descending
        assert ids(dashboard)[:3] == ["run-00", "run-01", "run-02"]
        ask(dashboard, sort_by="run_id", descending=True)
        assert ids(dashboard)[0] == "run-waits"

        ask(dashboard, status="waiting_approval")
        assert ids(dashboard) == ["run-waits"] and view.total == 1 and view.pages == 1
        assert view.rows[0]["cells"]["reason"] == "1 approval"
        ask(dashboard, status="attention")
        assert ids(dashboard) == ["run-waits"]
        ask(dashboard, status="")
        ask(dashboard, search="RUN-0")  # case-insensitive, in run id, agent, status, reason
        assert view.total == 10
        ask(dashboard, search="greeter run-4")  # every word must match
        assert sorted(ids(dashboard)) == [f"run-{i}" for i in range(40, 50)]
        ask(dashboard, search="", page_size=100)
        assert len(view.rows) == 58 and view.pages == 1
        dashboard.close()


async def test_cells_are_one_line_cost_is_blank_when_unknown_and_the_full_reason_is_kept(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, greeter(), janitor(), flaky(LONG_ERROR)) as runtime:
        await (await runtime.submit("greeter", "Hi.", run_id="run-free")).result()
        priced = await runtime.submit("janitor", "Clean up.", run_id="run-priced")
        await priced.wait("waiting_approval")
        failed = await runtime.submit("flaky", "Answer.", run_id="run-failed")
        with pytest.raises(nd.RunEndedError):
            await failed.wait("completed")
        dashboard = RunsDashboard(runtime)
        rows = {row["id"]: row for row in dashboard.view.rows}
        assert rows["run-free"]["cells"]["cost"] == ""  # a model without a price: blank
        assert rows["run-priced"]["cells"]["cost"].startswith("$0.000")
        assert rows["run-priced"]["cells"]["tokens"] == "18"
        reason = rows["run-failed"]["cells"]["reason"]
        assert reason.startswith("model_error: RuntimeError: The warehouse refused")
        assert "\n" not in reason and len(reason) <= 160 and reason.endswith("…")
        full = rows["run-failed"]["titles"]["reason"]
        assert full.endswith("credentials expired for etl; ") and len(full) > 300
        assert "<NA>" not in json.dumps(dashboard.view.rows)
        dashboard.close()


async def test_approve_in_a_row_resumes_the_run_and_the_table_follows(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        dashboard = RunsDashboard(runtime, refresh_interval=0.05)
        [row] = dashboard.view.approvals
        assert row["call"] == 'drop_table(name="stg_2023")' and row["run_id"] == "run-1"
        assert row["agent"] == "janitor" and row["state"] == "pending" and row["requested_at"]
        front_end_sends(
            dashboard.view,
            {"type": "approve", "run_id": "run-1", "approval_id": row["approval_id"]},
        )
        await dashboard.settled()
        [answered] = dashboard.view.approvals
        assert answered["state"] == "approved" and answered["message"].startswith("approved")
        assert answered["answered_at"] > 0
        assert (await run.result()).text == "Done: dropped stg_2023."
        # no refresh() call: the background read sees the run complete
        await eventually(lambda: dashboard.view.rows[0]["status"] == "completed")
        assert dashboard.view.rows[0]["cells"]["steps"] == "3"
        # the answered line stays (no buttons) until dismissed
        assert [a["state"] for a in dashboard.view.approvals] == ["approved"]
        front_end_sends(dashboard.view, {"type": "dismiss", "approval_id": row["approval_id"]})
        assert dashboard.view.approvals == []
        dashboard.close()


async def test_deny_in_a_row_passes_the_reason_to_the_model(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        dashboard = RunsDashboard(runtime)
        [row] = dashboard.view.approvals
        front_end_sends(
            dashboard.view,
            {
                "type": "deny",
                "run_id": "run-1",
                "approval_id": row["approval_id"],
                "reason": "keep it for the audit",
            },
        )
        await dashboard.settled()
        [answered] = dashboard.view.approvals
        assert answered["state"] == "denied" and "keep it for the audit" in answered["message"]
        result = await run.result()
        dashboard.close()
    errors = [
        p.result for m in result.messages if m.role == "tool" for p in m.content if p.is_error
    ]
    assert errors == ["keep it for the audit"]


async def test_a_request_answered_elsewhere_or_clicked_twice_is_answered_once(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        first = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await first.wait("waiting_approval")
        dashboard = RunsDashboard(runtime)
        [row] = dashboard.view.approvals
        await first.deny(reason="answered in the CLI")  # while the dashboard still lists it
        click_approve = {"type": "approve", "run_id": "run-1", "approval_id": row["approval_id"]}
        front_end_sends(dashboard.view, click_approve)
        await dashboard.settled()
        [answered] = dashboard.view.approvals
        assert answered["state"] == "stale"  # nothing recorded: the denial stands
        result = await first.result()
        assert "answered in the CLI" in str(result.messages)

        second = await runtime.submit("janitor", "Again.", run_id="run-2")
        await second.wait("waiting_approval")
        await dashboard.refreshed()
        pending = [a for a in dashboard.view.approvals if a["run_id"] == "run-2"]
        click_two = {
            "type": "approve",
            "run_id": "run-2",
            "approval_id": pending[0]["approval_id"],
        }
        front_end_sends(dashboard.view, click_two)
        front_end_sends(dashboard.view, click_two)  # a double click
        front_end_sends(dashboard.view, {**click_two, "type": "deny"})
        await dashboard.settled()
        [answered] = [a for a in dashboard.view.approvals if a["run_id"] == "run-2"]
        assert answered["state"] == "approved"
        done = await second.result()
        assert done.text == "Done: dropped stg_2023."
        results = [
            p.result for m in done.messages if m.role == "tool" for p in m.content if p.is_error
        ]
        assert results == []  # the deny that followed the approve was never submitted
        dashboard.close()


async def test_no_token_and_no_secret_ever_reach_the_view(
    tmp_path: Path, comms: list[tuple[float, str, dict[str, Any]]]
) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        [request] = await run.pending_approvals()
        assert request.token and request.token.startswith("v1.")
        dashboard = RunsDashboard(runtime, refresh_interval=0.05)
        front_end_sends(dashboard.view, {"type": "ping", "nonce": 1})
        front_end_sends(
            dashboard.view,
            {"type": "approve", "run_id": "run-1", "approval_id": request.approval_id},
        )
        await dashboard.settled()
        await run.result()
        await eventually(lambda: dashboard.view.rows[0]["status"] == "completed")
        sent = json.dumps([data for _at, _comm, data in comms], default=str)
        state = json.dumps(dashboard.view.get_state(), default=str)
        for secret in (request.token, request.token.split(".")[2], SECRET):
            assert secret not in sent and secret not in state
        pongs = [d for _t, c, d in comms if c == dashboard.view.comm.comm_id and "pong" in str(d)]
        assert pongs, "the ping got no pong"
        dashboard.close()


async def test_a_click_on_a_run_shows_its_widget_or_history_below(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        loop_store = runtime.store  # a loop run in the same store: no runtime record
        model = nd.ScriptedModel([nd.Turn.call("lookup", "Look.", table="t"), "Fine."])
        await nd.generate_text(
            model=model,
            messages=[nd.user("Look.")],
            tools=[lookup],
            session=nd.DurableSession(loop_store, run_id="loop-1"),
        )
        dashboard = RunsDashboard(runtime)
        front_end_sends(dashboard.view, {"type": "open", "run_id": "run-1", "view": "run"})
        await dashboard.settled()
        [shown] = dashboard.detail.children
        assert isinstance(shown, RunWidget) and shown.run_id == "run-1"
        assert (dashboard.view.selected, dashboard.view.detail) == ("run-1", "run")
        await eventually(lambda: shown.status == "waiting_approval")

        front_end_sends(dashboard.view, {"type": "open", "run_id": "run-1", "view": "history"})
        await dashboard.settled()
        [browser] = dashboard.detail.children
        assert isinstance(browser, HistoryBrowser) and shown.comm is None  # the old one closed
        assert dashboard.view.detail == "history"

        front_end_sends(dashboard.view, {"type": "open", "run_id": "loop-1", "view": "run"})
        await dashboard.settled()
        [loop_view] = dashboard.detail.children
        assert isinstance(loop_view, HistoryBrowser) and loop_view.run_id == "loop-1"
        loop_row = next(r for r in dashboard.view.rows if r["id"] == "loop-1")
        assert loop_row["live"] is False and loop_row["status"] == "completed"

        front_end_sends(dashboard.view, {"type": "close"})
        assert dashboard.detail.children == () and dashboard.view.selected == ""
        front_end_sends(dashboard.view, {"type": "open", "run_id": "no-such-run"})
        await dashboard.settled()
        assert dashboard.view.message_error and "no-such-run" in dashboard.view.message
        dashboard.close()


async def test_the_table_follows_new_runs_and_state_changes_without_stale_labels(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, janitor(), greeter()) as runtime:
        dashboard = RunsDashboard(runtime, refresh_interval=0.05)
        assert dashboard.view.rows == [] and dashboard.view.runs_total == 0
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await eventually(lambda: [r["status"] for r in dashboard.view.rows] == ["waiting_approval"])
        await eventually(lambda: len(dashboard.view.approvals) == 1)
        await run.approve()  # from code, not from the dashboard
        await eventually(lambda: [r["status"] for r in dashboard.view.rows] == ["completed"])
        assert dashboard.view.approvals == []  # answered elsewhere: it leaves the list
        assert dashboard.view.counts == {"completed": 1}
        assert dashboard.view.updated_at > 0
        dashboard.close()
        assert dashboard.task is not None
        await eventually(lambda: dashboard.task.done())


async def test_reads_pause_when_no_view_is_heard_of_and_a_ping_resumes_them(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, greeter()) as runtime:
        dashboard = RunsDashboard(runtime, refresh_interval=0.02, pause_after=0.1)
        front_end_sends(dashboard.view, {"type": "ping", "nonce": 1})
        await eventually(lambda: dashboard.view.paused)
        await (await runtime.submit("greeter", "Hi.", run_id="run-1")).result()
        for _ in range(5):
            await dashboard_turn(dashboard)
        assert dashboard.view.rows == []  # paused: the store is not read
        front_end_sends(dashboard.view, {"type": "ping", "nonce": 2})
        await eventually(lambda: [r["id"] for r in dashboard.view.rows] == ["run-1"])
        assert not dashboard.view.paused
        dashboard.close()


async def test_a_view_out_of_sight_stops_the_reads_and_quiet_reads_back_off(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, greeter()) as runtime:
        dashboard = RunsDashboard(runtime, refresh_interval=0.02)
        front_end_sends(dashboard.view, {"type": "visibility", "visible": False})
        await (await runtime.submit("greeter", "Hi.", run_id="run-1")).result()
        for _ in range(5):
            await dashboard_turn(dashboard)
        assert dashboard.view.rows == []  # nobody sees it: the store is not read
        front_end_sends(dashboard.view, {"type": "visibility", "visible": True})
        await eventually(lambda: [r["id"] for r in dashboard.view.rows] == ["run-1"])
        # nothing changes: each quiet read doubles the pause before the next
        read_at = dashboard.view.updated_at
        await eventually(lambda: dashboard.view.updated_at != read_at)
        await asyncio.sleep(0.5)
        first = dashboard.view.updated_at
        await eventually(lambda: dashboard.view.updated_at != first, timeout=5)
        assert dashboard.view.updated_at - first > 100  # not every 20 ms any more
        dashboard.close()


async def dashboard_turn(dashboard: RunsDashboard) -> None:
    await asyncio.sleep(dashboard.refresh_interval * 2)


async def test_messages_that_make_no_sense_change_nothing(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, greeter()) as runtime:
        await (await runtime.submit("greeter", "Hi.", run_id="run-1")).result()
        dashboard = RunsDashboard(runtime)
        before = dashboard.view.get_state()
        for content in (
            {"type": "launch-missiles"},
            {"type": "query", "sort_by": "secret", "page": -3, "page_size": True},
            {"type": "query", "descending": "yes", "search": 7},
            {"no": "action"},
            {"type": "dismiss", "approval_id": "nothing"},
        ):
            front_end_sends(dashboard.view, content)
        front_end_sends(dashboard.view, ["not", "a", "dict"])  # type: ignore[arg-type]
        after = dashboard.view.get_state()
        assert {k: v for k, v in after.items() if k != "page"} == {
            k: v for k, v in before.items() if k != "page"
        }
        assert after["page"] == 0
        ask(dashboard, page_size=10**6)
        assert dashboard.view.page_size == 100
        ask(dashboard, status="no-such-status")
        assert dashboard.view.rows == [] and dashboard.view.total == 0
        dashboard.close()


async def test_resume_retries_a_failed_run_and_rewind_shows_the_fork(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor(), flaky()) as runtime:
        failed = await runtime.submit("flaky", "Answer.", run_id="run-failed")
        with pytest.raises(nd.RunEndedError):
            await failed.wait("completed")
        dashboard = RunsDashboard(runtime)
        assert await dashboard.resume("run-failed") == "run-failed: retried"
        assert (await failed.result()).text == "Recovered."
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        assert "waits for approvals" in await dashboard.resume("run-1")
        [outcome] = await dashboard.approve("run-1")
        assert outcome.state == "approved"
        await run.result()
        assert await dashboard.approve("run-1") == []  # nothing left to approve
        assert dashboard.view.message == "run-1 waits for no approval"
        fork = await dashboard.rewind("run-1", 0, edit="Only look, drop nothing.")
        [view] = dashboard.detail.children
        assert isinstance(view, RunWidget) and view.run_id == fork.run_id
        checkpoint = runtime.store.load(fork.run_id, step_index=0)
        assert checkpoint.forked_from == nd.ForkPoint(run_id="run-1", step_index=0, edited=True)
        await fork.wait("waiting_approval", "completed")
        dashboard.close()


async def test_history_browser_shows_each_step_and_rewinds_from_it(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        await run.approve()
        await run.result()
        browser = HistoryBrowser(runtime, "run-1")
        assert list(browser.slider.options) == [0, 1, 2] and browser.step == 2
        assert "Done: dropped stg_2023." in browser.messages.value
        browser.slider.value = 0
        assert "stg_2023" in browser.messages.value and "Done:" not in browser.messages.value
        assert browser.summary.value.startswith("step 0: running")
        assert "$" in browser.summary.value  # the scripted model is priced
        browser.edit_input.value = "Leave stg_2023 alone."
        click(browser.rewind_button)
        fork = await browser.actions.last
        assert fork is browser.fork and fork.run_id != "run-1"
        [view] = browser.detail.children
        assert isinstance(view, RunWidget) and view.run_id == fork.run_id
        assert f"as {fork.run_id}" in browser.message.value
        checkpoint = runtime.store.load(fork.run_id, step_index=0)
        assert checkpoint.forked_from == nd.ForkPoint(run_id="run-1", step_index=0, edited=True)
        assert checkpoint.messages[-1].content[0].text == "Leave stg_2023 alone."
        await fork.wait("waiting_approval", "completed")
        await eventually(lambda: view.status in ("waiting_approval", "completed"))
        assert run.status == "completed"  # the original run is never modified
        # a fork's browser says which run and step it came from
        forked = HistoryBrowser(runtime, fork.run_id)
        assert "forked from run-1 at step 0" in forked.children[0].value
        forked.slider.value = 0  # the browser opens at the fork's last step
        assert forked.summary.value.startswith("step 0 (forked from run-1 at step 0)")
        forked.close()


async def test_history_browser_reads_as_a_table_with_rewind_by_the_slider(tmp_path: Path) -> None:
    long = "Clean up the stale staging tables, carefully. " * 10
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", long, run_id="run-1")
        await run.wait("waiting_approval")
        await run.approve()
        await run.result()
        browser = HistoryBrowser(runtime, "run-1")
        # "Rewind from here" sits by the slider it acts on
        (controls,) = [c for c in browser.children if browser.slider in getattr(c, "children", ())]
        assert browser.rewind_button in controls.children
        table = browser.messages.value
        assert table.count("<thead>") == 1 and table.count("<tr>") == 1 + len(
            nd.inspect.messages(runtime.store, "run-1")
        )  # one header row: no second row for the index name
        assert "<th>is_error</th>" not in table and "<th>images</th>" not in table
        assert "<th>role</th>" in table and "<th>text</th>" in table
        # the cut preview opens to the whole message
        assert "<details><summary>" in table and html.escape(long.strip()) in table
        browser.close()


async def test_a_dashboard_on_the_in_memory_store_reads_on_the_loop() -> None:
    store = nd.open_store("memory://")
    runtime = await nd.DurableRuntime.open(
        store=store, agents=[janitor()], approval_signer=nd.ApprovalSigner(SECRET)
    )
    try:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        dashboard = RunsDashboard(runtime, refresh_interval=0.02)
        assert not dashboard.source.threaded
        [row] = dashboard.view.approvals
        [outcome] = await dashboard.approve("run-1", row["approval_id"])
        assert outcome.state == "approved"
        await run.result()
        await eventually(lambda: dashboard.view.rows[0]["status"] == "completed")
        dashboard.close()
    finally:
        await runtime.close()


async def test_a_request_parked_past_the_token_age_is_approved_with_a_fresh_token(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, janitor(), approval_max_age_ms=200) as runtime:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        dashboard = RunsDashboard(runtime)
        [row] = dashboard.view.approvals
        await asyncio.sleep(0.3)  # the stored token is past the maximum age now
        front_end_sends(
            dashboard.view,
            {"type": "approve", "run_id": "run-1", "approval_id": row["approval_id"]},
        )
        await dashboard.settled()
        [answered] = dashboard.view.approvals
        assert answered["state"] == "approved", answered["message"]
        assert (await run.result()).text == "Done: dropped stg_2023."
        dashboard.close()


async def test_a_dashboard_on_postgresql_reads_in_a_thread_and_approves_in_a_row(
    pg_database: str,
) -> None:
    store = nd.open_store(pg_database)
    runtime = await nd.DurableRuntime.open(
        store=store,
        agents=[janitor(), flaky(LONG_ERROR)],
        approval_signer=nd.ApprovalSigner(SECRET),
    )
    try:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        failed = await runtime.submit("flaky", "Answer.", run_id="run-failed")
        await run.wait("waiting_approval")
        with pytest.raises(nd.RunEndedError):
            await failed.wait("completed")
        dashboard = RunsDashboard(runtime, refresh_interval=0.05)
        assert dashboard.source.threaded
        [row] = dashboard.view.approvals
        front_end_sends(
            dashboard.view,
            {"type": "approve", "run_id": "run-1", "approval_id": row["approval_id"]},
        )
        await dashboard.settled()
        assert dashboard.view.approvals[0]["state"] == "approved"
        await run.result()
        await eventually(
            lambda: (
                {r["id"]: r["status"] for r in dashboard.view.rows}
                == {"run-1": "completed", "run-failed": "failed"}
            )
        )
        ask(dashboard, status="failed")
        [failed_row] = dashboard.view.rows
        assert failed_row["cells"]["reason"].startswith("model_error: RuntimeError")
        dashboard.close()
    finally:
        await runtime.close()
        store.close()


async def test_a_dashboard_and_a_history_browser_write_static_summaries(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        dashboard = RunsDashboard(runtime)
        await dashboard.refreshed()
        data, _ = dashboard._repr_mimebundle_()
        # a saved notebook reopened without a kernel shows these, not the widget's repr
        assert "application/vnd.jupyter.widget-view+json" in data
        assert data["text/plain"].startswith("nbdurable runs: 1 (1 waiting_approval)")
        assert 'run-1: drop_table(name="stg_2023")' in data["text/plain"]
        assert "<td>run-1</td>" in data["text/html"] and "object at 0x" not in str(data)
        browser = HistoryBrowser(runtime, "run-1")
        data, _ = browser._repr_mimebundle_()
        assert data["text/plain"].startswith("nbdurable history of run-1: 2 checkpoint(s)")
        assert "object at 0x" not in str(data)
        browser.close()
        dashboard.close()
