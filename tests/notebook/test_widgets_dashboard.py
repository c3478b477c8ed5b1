"""RunsDashboard and HistoryBrowser on real runs: filters, row actions, rewind from a step."""

from __future__ import annotations

from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.notebook.widgets import HistoryBrowser, RunsDashboard, RunWidget

from .widget_fixtures import click, eventually, janitor, runtime_for

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def flaky() -> nd.Agent:
    """Fails its first model call (no retry policy), then answers."""
    model = nd.ScriptedModel(["Recovered."], fail_on=[1])
    return nd.Agent("flaky", model, [], version="1")


async def test_filters_refresh_and_show(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor(), flaky()) as runtime:
        waiting = await runtime.submit("janitor", "Clean up.", run_id="run-waiting")
        await waiting.wait("waiting_approval")
        failed = await runtime.submit("flaky", "Answer.", run_id="run-failed")
        await failed.wait("failed")
        dashboard = RunsDashboard(runtime)
        assert [rid for _label, rid in dashboard.selector.options] == ["run-waiting", "run-failed"]
        assert (
            "run-waiting" in dashboard.table.value and "waiting_approval" in dashboard.table.value
        )
        dashboard.status_filter.value = "failed"
        assert list(dashboard.frame.index) == ["run-failed"]
        assert "run-waiting" not in dashboard.table.value
        dashboard.status_filter.value = "completed"
        assert dashboard.frame.empty and "no runs" in dashboard.table.value
        done = await runtime.submit("flaky", "Again.", run_id="run-done")  # call 2 succeeds
        await done.result()
        click(dashboard.refresh_button)
        assert list(dashboard.frame.index) == ["run-done"]
        dashboard.status_filter.value = "all"
        dashboard.selector.value = "run-waiting"
        click(dashboard.show_button)
        shown = await dashboard.actions.last
        assert isinstance(shown, RunWidget) and dashboard.detail.children == (shown,)
        await eventually(lambda: shown.status == "waiting_approval")
        again = await dashboard.show("run-failed")  # the previous view is closed
        assert shown.comm is None and dashboard.detail.children == (again,)


async def test_resume_retries_a_failed_run_and_approve_resumes_a_waiting_one(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, janitor(), flaky()) as runtime:
        failed = await runtime.submit("flaky", "Answer.", run_id="run-failed")
        await failed.wait("failed")
        waiting = await runtime.submit("janitor", "Clean up.", run_id="run-waiting")
        await waiting.wait("waiting_approval")
        dashboard = RunsDashboard(runtime)

        dashboard.selector.value = "run-waiting"
        click(dashboard.resume_button)
        said = await dashboard.actions.last
        assert "waits for approvals" in said and waiting.status == "waiting_approval"

        dashboard.selector.value = "run-failed"
        click(dashboard.resume_button)
        assert await dashboard.actions.last == "run-failed: retried"
        assert (await failed.result()).text == "Recovered."

        dashboard.selector.value = "run-waiting"
        click(dashboard.approve_button)
        [outcome] = await dashboard.actions.last
        assert outcome.state == "approved" and "drop_table" in dashboard.message.value
        assert (await waiting.result()).text == "Done: dropped stg_2023."
        view = dashboard.detail.children[0]
        await eventually(lambda: view.status == "completed")
        click(dashboard.approve_button)  # nothing left to approve
        assert await dashboard.actions.last == []
        assert "waits for no approval" in dashboard.message.value
        dashboard.refresh()
        assert dashboard.frame.loc["run-waiting", "status"] == "completed"


async def test_deny_from_the_dashboard_passes_the_reason(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        dashboard = RunsDashboard(runtime)
        dashboard.reason_input.value = "keep it for the audit"
        click(dashboard.deny_button)
        [outcome] = await dashboard.actions.last
        assert outcome.state == "denied"
        result = await run.result()
    errors = [
        p.result for m in result.messages if m.role == "tool" for p in m.content if p.is_error
    ]
    assert errors == ["keep it for the audit"]


async def test_rewind_from_the_dashboard_forks_with_an_edit_and_shows_the_fork(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        await run.approve()
        await run.result()
        dashboard = RunsDashboard(runtime)
        dashboard.selector.value = "run-1"
        dashboard.step_input.value = 0
        dashboard.edit_input.value = "Only look, drop nothing."
        click(dashboard.rewind_button)
        fork = await dashboard.actions.last
        assert isinstance(fork, nd.runtime.Run) and fork.run_id != "run-1"
        view = dashboard.detail.children[0]
        assert isinstance(view, RunWidget) and view.run_id == fork.run_id
        assert dashboard.frame.loc[fork.run_id, "parent_run"] == "run-1"
        await fork.wait("waiting_approval", "completed")
        checkpoint = runtime.store.load(fork.run_id, step_index=0)
        assert checkpoint.forked_from == nd.ForkPoint(run_id="run-1", step_index=0, edited=True)
        assert checkpoint.messages[-1].content[0].text == "Only look, drop nothing."
        await eventually(lambda: view.status in ("waiting_approval", "completed"))


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


async def test_an_action_error_is_shown_not_lost(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.", run_id="run-1")
        await run.wait("waiting_approval")
        dashboard = RunsDashboard(runtime)
        dashboard.step_input.value = 7  # no such checkpoint
        click(dashboard.rewind_button)
        assert await dashboard.actions.last is None
        assert "CheckpointNotFoundError" in dashboard.message.value
        assert list(dashboard.frame.index) == ["run-1"] and dashboard.detail.children == ()
