"""The runs dashboard in JupyterLab and Notebook 7, in a real (headless) Chromium.

A notebook fills the default store with 33 runs (30 answered, one failed with a
long error, two waiting for an approval) and shows ``%durable dashboard``.

- JupyterLab: the approvals are on top and one page of runs below, one line each;
  Approve in a row resumes that run and the table shows it complete without a
  Refresh; Deny asks for a reason in its row and sends it; a click on a run shows
  its live widget below; a header sorts, the filter and the search narrow; in the
  dark theme every text keeps its contrast; after a kernel restart the dashboard
  says it is disconnected and its buttons are off. Screenshots
  ``dashboard-approval.png``, ``dashboard-completed.png``, ``dashboard-dark.png``,
  ``dashboard-disconnected.png``.
- Notebook 7: the notebook executed headless (widget state saved) and opened later
  shows the dashboard as it was, disconnected, its buttons off. Screenshot
  ``dashboard-saved.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .harness import Server
from .pages import (
    LAB,
    NOTEBOOK7,
    Clock,
    cells,
    diagnosed,
    enabled,
    low_contrast,
    restart_kernel,
    run_all,
    set_theme,
    shot,
)

NOTEBOOK = "dashboard.ipynb"
DISCONNECTED = "disconnected: re-run the cell or %durable dashboard"

DEMO = '''\
"""Agents and runs for the dashboard's browser test (imported by the notebook)."""
import nbdurable as nd
from nbdurable.notebook import session


@nd.tool
def lookup(table: str) -> dict:
    """Look a table up."""
    return {"table": table, "rows": 0}


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


janitor = nd.Agent(
    "janitor",
    nd.ScriptedModel(
        [
            nd.Turn.call("lookup", "Looking at stg_2023.", table="stg_2023"),
            nd.Turn.call("drop_table", "stg_2023 is empty.", name="stg_2023"),
            "Done: dropped stg_2023.",
        ],
        price_per_million=(3.0, 15.0),
    ),
    [lookup, drop_table],
    version="1",
)
greeter = nd.Agent("greeter", nd.ScriptedModel(["Hello!"]), version="1")
ERROR = "The warehouse refused the connection: " + "credentials expired for etl; " * 12
flaky = nd.Agent("flaky", nd.ScriptedModel(["never"], fail_on={1: RuntimeError(ERROR)}), version="1")


async def fill() -> None:
    """30 answered runs, one failed with a long error, two waiting for an approval."""
    nb = session()
    for i in range(30):
        await nb.submit(greeter, f"Say hello {i}.", run_id=f"hello-{i:02d}").result()
    nb.submit(flaky, "Load the warehouse.", run_id="load-warehouse")
    waiting = nb.submit(janitor, "Clean up the staging tables.", run_id="clean-up")
    await waiting.wait("waiting_approval")
    other = nb.submit(janitor, "Clean up the archive.", run_id="archive")
    await other.wait("waiting_approval")
'''
SETUP = "%load_ext nbdurable\nfrom dashboard_demo import fill\n\nawait fill()"


def write_notebook(folder: Path, *extra: str) -> str:
    """The dashboard notebook (and its module) in ``folder``; its path under the root."""
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(source) for source in (SETUP, "%durable dashboard", *extra)
    ]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nbformat.write(notebook, folder / NOTEBOOK)
    (folder / "dashboard_demo.py").write_text(DEMO)
    return f"{folder.name}/{NOTEBOOK}"


def assert_dead(dash: Any) -> None:
    """The dashboard says it is disconnected, and nothing in it can be clicked or typed."""
    dash.locator(".nbd-dash-live.nbd-dash-gone").wait_for(timeout=30_000)
    assert dash.get_attribute("data-kernel") == "disconnected"
    assert dash.locator(".nbd-dash-live").inner_text() == DISCONNECTED
    for control in ("button.nbd-dash-refresh", "select.nbd-dash-status", "input.nbd-dash-search"):
        assert dash.locator(control).is_disabled(), control
    buttons = dash.locator("button:visible")
    assert buttons.count() > 0
    assert all(b.is_disabled() for b in buttons.all())


def test_the_dashboard_approves_denies_and_follows_the_store_in_jupyterlab(
    jupyter: Server, page: Any, folder: Path
) -> None:
    clock = Clock()
    path = write_notebook(folder)
    assert jupyter.settings is not None
    themes = jupyter.settings / "@jupyterlab" / "apputils-extension" / "themes.jupyterlab-settings"
    with diagnosed(page, jupyter, "dashboard"):
        try:
            LAB.open(page, jupyter, path)
            dash = page.locator(".nbd-dash")
            run_all(page, jupyter, dash)
            page.locator(".nbd-dash[data-kernel='live']").wait_for()
            approval = dash.locator(".nbd-dash-approval").filter(has_text="clean-up")
            approve = approval.locator("button.nbd-dash-approve")
            enabled(approve, timeout=60)
            clock("the dashboard is live, two approvals wait")
            assert dash.locator(".nbd-dash-approval").count() == 2
            call = approval.locator(".nbd-dash-call").inner_text()
            assert call == 'drop_table(name="stg_2023")'
            assert approval.locator(".nbd-dash-agent").inner_text() == "janitor"

            # one page of runs, each on one line; the long error is cut, whole on hover
            rows = dash.locator(".nbd-dash-table tbody tr")
            assert rows.count() == 25
            assert "of 33" in dash.locator(".nbd-dash-page-info").inner_text()
            assert rows.first.get_attribute("data-run-id") == "archive"  # newest first
            reason = dash.locator("tr[data-run-id='load-warehouse'] td.nbd-c-reason")
            assert reason.inner_text().startswith("model_error: RuntimeError: The warehouse")
            title = reason.get_attribute("title") or ""
            assert title.strip().endswith("credentials expired for etl;")
            heights = {round(r.bounding_box()["height"]) for r in rows.all()}
            assert max(heights) <= 30, f"rows are not one line each: {heights}"
            assert "<NA>" not in dash.inner_text()
            dash.scroll_into_view_if_needed()
            shot(dash, "dashboard-approval.png")

            approve.click()
            approval.locator(".nbd-dash-outcome", has_text="approved").wait_for()
            assert "nbd-dash-a-approved" in (approval.get_attribute("class") or "")
            # no Refresh click: the table follows the store
            done = dash.locator("tr[data-run-id='clean-up'] .nbd-dash-badge.nbd-s-completed")
            done.wait_for()
            assert approve.is_hidden()
            clock("approved in the row: the run completed in the table")

            # Deny asks for a reason in the row; Enter sends it, the model reads it
            other = dash.locator(".nbd-dash-approval").filter(has_text="archive")
            other.locator("button.nbd-dash-deny").click()
            reason_input = other.locator("input.nbd-dash-reason")
            reason_input.wait_for()
            assert reason_input.evaluate("(el) => el === document.activeElement")
            page.keyboard.type("keep it for the audit")
            page.keyboard.press("Enter")
            other.locator(".nbd-dash-outcome", has_text="keep it for the audit").wait_for()
            assert "nbd-dash-a-denied" in (other.get_attribute("class") or "")
            dash.locator("tr[data-run-id='archive'] .nbd-dash-badge.nbd-s-completed").wait_for()

            # a click on the row shows the run's live widget below the dashboard
            dash.locator("tr[data-run-id='clean-up']").click()
            run_view = page.locator(".nbd-run").first
            run_view.locator(".nbd-badge.nbd-status-completed").wait_for()
            detail = dash.locator(".nbd-dash-detail").inner_text()
            assert detail == "below: live view of clean-up"
            dash.locator("tr.nbd-dash-selected[data-run-id='clean-up']").wait_for()

            # sort, filter, search: the kernel sends the page asked for
            dash.locator("th.nbd-c-cost").click()  # ascending: cheapest first, blanks last
            dash.locator("th.nbd-c-cost .nbd-dash-arrow").wait_for()
            page.wait_for_function(
                "() => ['clean-up', 'archive'].includes("
                "document.querySelector('.nbd-dash tbody tr').dataset.runId)"
            )
            costs = [c.strip() for c in dash.locator("td.nbd-c-cost").all_inner_texts()]
            assert costs[0].startswith("$") and costs[2:] == [""] * (len(costs) - 2), costs
            dash.locator("select.nbd-dash-status").select_option("failed")
            page.wait_for_function(
                "() => document.querySelectorAll('.nbd-dash tbody tr').length === 1"
            )
            assert rows.first.get_attribute("data-run-id") == "load-warehouse"
            dash.locator("select.nbd-dash-status").select_option("")
            dash.locator("button.nbd-dash-next").click()
            page.wait_for_function(
                "() => document.querySelectorAll('.nbd-dash tbody tr').length === 8"
            )
            assert dash.locator(".nbd-dash-page-info").inner_text().startswith("26–33 of 33")
            dash.locator("input.nbd-dash-search").fill("hello-2")
            page.wait_for_function(
                "() => document.querySelectorAll('.nbd-dash tbody tr').length === 10"
            )
            dash.locator("tr[data-run-id='hello-29'] button.nbd-dash-history").click()
            dash.locator(".nbd-dash-detail", has_text="below: history of hello-29").wait_for()
            page.locator(".widget-vbox", has_text="hello-29: 1 checkpoint").first.wait_for()
            clock("paged, sorted, filtered, searched, a history shown")
            shot(page, "dashboard-completed.png")

            # JupyterLab's dark theme: every text keeps its contrast
            set_theme(page, "JupyterLab Dark")
            dash.locator("select.nbd-dash-status").select_option("")
            dash.locator("input.nbd-dash-search").fill("")
            page.wait_for_function(
                "() => document.querySelectorAll('.nbd-dash tbody tr').length === 25"
            )
            dash.locator("tr[data-run-id='load-warehouse']").hover()
            assert low_contrast(dash) == []
            shot(dash, "dashboard-dark.png")

            # the kernel restarts: the dashboard says so and its buttons are off
            restart_kernel(page)
            assert_dead(dash)
            assert low_contrast(dash) == []
            shot(dash, "dashboard-disconnected.png")
            clock("kernel restarted: the dashboard is disconnected")
        finally:
            themes.unlink(missing_ok=True)  # the next tests open in the default theme


WAIT = """\
import asyncio
await asyncio.sleep(0.5)  # the dashboard's last update arrives while a cell runs"""


def test_a_saved_notebook_reopened_without_its_kernel_shows_the_dashboard_disabled(
    jupyter: Server, page: Any, folder: Path
) -> None:
    import nbformat

    pytest.importorskip("nbclient")
    import nbclient

    path = write_notebook(folder, WAIT)
    saved = nbformat.read(folder / NOTEBOOK, as_version=4)
    nbclient.NotebookClient(
        saved, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(folder)}}
    ).execute()
    jupyter.trust(saved)  # as after `jupyter trust`, or saved by the user's own front end
    nbformat.write(saved, folder / NOTEBOOK)
    with diagnosed(page, jupyter, "dashboard-saved"):
        NOTEBOOK7.open(page, jupyter, path)
        dash = cells(page).nth(1).locator(".nbd-dash")
        assert_dead(dash)
        assert dash.locator(".nbd-dash-approval").count() == 2  # as it was saved
        assert dash.locator(".nbd-dash-table tbody tr").count() == 25
        shot(page, "dashboard-saved.png")
