"""Widgets whose kernel is gone never look live: after a restart, and in a reopened notebook.

- JupyterLab, dark theme: a run waits for approval; the kernel is restarted; the
  old view says "disconnected: re-run the cell to follow this run again, or %durable
  show RUN" and its
  buttons are disabled; ``%durable show`` in the new kernel gives a live view
  whose Approve finishes the run. Screenshots ``jupyterlab-dark.png``,
  ``jupyterlab-restarted.png``.
- Notebook 7: a notebook executed headless (nbclient, widget state saved) and
  opened later shows the widget as it was, disconnected, its buttons disabled.
  Screenshot ``notebook7-saved-widget.png``.
- JupyterLab saving widget state (its "Save Widget State Automatically"): a view
  follows a 30-step run live and the kernel never sends the whole run (the view's
  model composes the ``snapshot`` trait it saves); the notebook saved, its kernel
  gone, reopened: every step shows. Screenshot ``jupyterlab-saved-live.png``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from .harness import Server
from .pages import (
    CLOCK_TIME,
    LAB,
    NOTEBOOK7,
    Clock,
    cells,
    diagnosed,
    enabled,
    low_contrast,
    matches,
    menu,
    restart_kernel,
    run_cell,
    set_theme,
    shot,
    stdout,
)

SETUP = '''\
%load_ext nbdurable
import nbdurable as nd

@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a warehouse table."""
    return f"dropped {name}"

model = nd.ScriptedModel(
    [nd.Turn.call("drop_table", "stg_2023 is stale: dropping it.", name="stg_2023"), "Dropped."]
)
janitor = nd.Agent("janitor", model, [drop_table], version="1")'''

AGENT = "%%agent janitor --run-id r1\nDrop the stale staging table."
DISCONNECTED = "disconnected: re-run the cell to follow this run again, or %durable show r1"


def notebook(*sources: str) -> Any:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    return nb


def assert_dead(view: Any) -> None:
    """The view says it is disconnected, and nothing in it can be clicked or typed."""
    view.locator(".nbd-live.nbd-disconnected").wait_for()
    assert view.get_attribute("data-kernel") == "disconnected"
    assert view.locator(".nbd-live").inner_text() == DISCONNECTED
    assert view.locator("button.nbd-approve").is_disabled()
    assert view.locator("button.nbd-deny").is_disabled()
    assert view.locator("button.nbd-grant").is_disabled()
    assert view.locator("input.nbd-reason").count() == 0  # shown once Deny is clicked


def test_after_a_kernel_restart_the_old_view_says_disconnected_and_a_fresh_one_takes_over(
    jupyter: Server, page: Any, folder: Path
) -> None:
    import nbformat

    clock = Clock()
    nbformat.write(notebook(SETUP, AGENT, "%durable show r1"), folder / "restart.ipynb")
    path = f"{folder.name}/restart.ipynb"
    assert jupyter.settings is not None
    themes = jupyter.settings / "@jupyterlab" / "apputils-extension" / "themes.jupyterlab-settings"
    with diagnosed(page, jupyter, "jupyterlab-restart"):
        try:
            LAB.open(page, jupyter, path)
            set_theme(page, "JupyterLab Dark")
            run_cell(page, 0)
            old = run_cell(page, 1).locator(".nbd-run")
            enabled(old.locator("button.nbd-approve"), timeout=60)
            clock("the run waits for approval, dark theme")
            assert low_contrast(old) == []
            old.scroll_into_view_if_needed()
            shot(page, "jupyterlab-dark.png")

            restart_kernel(page)
            assert_dead(old)
            clock("kernel restarted: the old view is disconnected")
            assert old.locator(".nbd-badge").inner_text() == "waiting_approval"  # as it was
            assert low_contrast(old) == []
            shot(page, "jupyterlab-restarted.png")

            # the new kernel: the agent's cell again, then a fresh view of the run
            LAB.wait_idle(page, jupyter, path)
            run_cell(page, 0)
            fresh = run_cell(page, 2).locator(".nbd-run")
            enabled(fresh.locator("button.nbd-approve"))
            fresh.locator("button.nbd-approve").click()
            fresh.locator(".nbd-badge.nbd-status-completed").wait_for()
            outcome = fresh.locator(".nbd-card-collapsed .nbd-card-outcome").inner_text()
            assert matches(f"approved at {CLOCK_TIME}", outcome), outcome
            assert cells(page).nth(1).locator(".nbd-live").inner_text() == DISCONNECTED
            clock("a fresh view approved, the run completed")
        finally:
            themes.unlink(missing_ok=True)  # the next tests open in the default theme


WAIT = """\
import asyncio
from nbdurable.notebook import session
await session().run("r1").wait("waiting_approval")
await asyncio.sleep(0.5)  # the widget's last update arrives while a cell runs"""


def test_a_saved_notebook_reopened_without_its_kernel_shows_its_widget_disabled(
    jupyter: Server, page: Any, folder: Path
) -> None:
    import nbformat

    pytest.importorskip("nbclient")
    import nbclient

    saved = notebook(SETUP, AGENT, WAIT)
    nbclient.NotebookClient(
        saved, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(folder)}}
    ).execute()
    jupyter.trust(saved)  # as after `jupyter trust`, or saved by the user's own front end
    nbformat.write(saved, folder / "saved.ipynb")
    path = f"{folder.name}/saved.ipynb"
    with diagnosed(page, jupyter, "notebook7-saved"):
        NOTEBOOK7.open(page, jupyter, path)
        view = cells(page).nth(1).locator(".nbd-run")
        assert_dead(view)
        assert view.locator(".nbd-badge").inner_text() == "waiting_approval"
        assert view.locator(".nbd-summary").inner_text() == "waiting for approval: drop_table"
        assert 'drop_table(name="stg_2023")' in view.locator(".nbd-card-call").inner_text()
        assert "stg_2023 is stale" in view.locator(".nbd-text").first.inner_text()
        age = view.locator(".nbd-age").inner_text()
        assert matches(f"asked at {CLOCK_TIME}", age), age  # not a clock still counting
        shot(page, "notebook7-saved-widget.png")


CELL = "%%agent janitor --as run\nDrop the stale staging table."
WAITING = "%durable runs --status waiting_approval"


def test_after_a_restart_rerunning_the_agent_cell_reattaches_to_its_run(
    jupyter: Server, page: Any, folder: Path
) -> None:
    """What the stale view advises is what happens: re-running the cell finds its run."""
    import nbformat

    nbformat.write(notebook(SETUP, CELL, WAITING), folder / "reattach.ipynb")
    path = f"{folder.name}/reattach.ipynb"
    with diagnosed(page, jupyter, "jupyterlab-reattach"):
        LAB.open(page, jupyter, path)
        run_cell(page, 0)
        old = run_cell(page, 1).locator(".nbd-run")
        enabled(old.locator("button.nbd-approve"), timeout=60)
        run_id = old.locator(".nbd-run-id").inner_text()
        restart_kernel(page)
        old.locator(".nbd-live.nbd-disconnected").wait_for()
        advice = old.locator(".nbd-live").inner_text()
        assert (
            advice
            == f"disconnected: re-run the cell to follow this run again, or %durable show {run_id}"
        )

        LAB.wait_idle(page, jupyter, path)
        run_cell(page, 0)
        cell = run_cell(page, 1)
        fresh = cell.locator(".nbd-run")
        enabled(fresh.locator("button.nbd-approve"))
        assert fresh.locator(".nbd-run-id").inner_text() == run_id  # the same run
        said = cell.locator(".jp-OutputArea-output").first.inner_text()
        assert said.startswith(f"re-attached to {run_id} (waiting_approval)"), said
        listed = run_cell(page, 2).locator(".jp-RenderedHTMLCommon table.dataframe tbody tr")
        listed.first.wait_for()
        assert listed.count() == 1  # one waiting run, not two
        shot(page, "jupyterlab-reattached.png")
        fresh.locator("button.nbd-approve").click()
        fresh.locator(".nbd-badge.nbd-status-completed").wait_for()


STEPS = 30
LONG_SETUP = f"""\
%load_ext nbdurable
import nbdurable as nd
from nbdurable.notebook import session
from nbdurable.notebook.widgets import RunWidget

@nd.tool
def lookup(table: str) -> dict:
    \"\"\"Look a table up.\"\"\"
    return {{"table": table, "rows": 42}}

script = [nd.Turn.call("lookup", f"Looking at table t{{i}} now.", table=f"t{{i}}") for i in range({STEPS})]
model = nd.ScriptedModel([*script, "Done: {STEPS} tables."], mode="sequential", stream_delay=0.03)
worker = nd.Agent("worker", model, [lookup], version="1", stream=True, max_steps={STEPS + 5})"""
FOLLOW = """\
run = session().submit(worker, "Look at every table.", run_id="w1")
widget = RunWidget(session().runtime, run.run_id)
widget"""
KERNEL_SENT = "print(widget.snapshot == {}, widget.steps[-1]['text'])  # what the kernel synced"


def saved_run_state(path: Path) -> dict[str, Any]:
    """The saved widget state of run w1's view in the notebook at ``path`` ({} if none)."""
    import nbformat

    widgets = nbformat.read(path, as_version=4).metadata.get("widgets", {})
    state = widgets.get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    views = [m["state"] for m in state.values() if m["state"].get("run_id") == "w1"]
    return views[0] if views else {}


def test_a_notebook_jupyterlab_saved_after_a_live_run_reopens_with_every_step(
    jupyter: Server, page: Any, folder: Path
) -> None:
    import nbformat

    nbformat.write(notebook(LONG_SETUP, FOLLOW, KERNEL_SENT), folder / "live.ipynb")
    path = f"{folder.name}/live.ipynb"
    assert jupyter.settings is not None
    manager = jupyter.settings / "@jupyter-widgets" / "jupyterlab-manager"
    manager.mkdir(parents=True, exist_ok=True)
    setting = manager / "plugin.jupyterlab-settings"
    setting.write_text('{"saveState": true}')  # Settings > Save Widget State Automatically
    with diagnosed(page, jupyter, "jupyterlab-saved-live"):
        try:
            LAB.open(page, jupyter, path)
            run_cell(page, 0)
            view = run_cell(page, 1).locator(".nbd-run")
            view.locator(".nbd-step").first.wait_for(timeout=60_000)
            assert view.locator(".nbd-badge").inner_text() == "running"  # rendered while live
            view.locator(".nbd-badge.nbd-status-completed").wait_for(timeout=120_000)
            assert view.locator(".nbd-step").count() == STEPS + 1
            run_cell(page, 2)
            page.wait_for_function(
                "() => document.querySelectorAll("
                "'.jp-OutputArea-output[data-mime-type=\"application/vnd.jupyter.stdout\"]'"
                ").length > 0"
            )
            # the kernel never synced the whole run: the view's model composed it
            assert stdout(page) == [f"True Done: {STEPS} tables.\n"], stdout(page)
            menu(page, "File", "docmanager:save")
            deadline = time.monotonic() + 30
            while (
                len(saved_run_state(folder / "live.ipynb").get("snapshot", {}).get("steps", []))
                != STEPS + 1
            ):
                assert time.monotonic() < deadline, saved_run_state(folder / "live.ipynb")
                time.sleep(0.2)
        finally:
            setting.unlink(missing_ok=True)  # the next tests save no widget state
    saved = saved_run_state(folder / "live.ipynb")
    assert saved["status"] == "completed"
    assert saved["snapshot"]["steps"][-1]["text"] == f"Done: {STEPS} tables."
    jupyter.shutdown_kernels()  # the kernel is gone: what shows is the saved state
    with diagnosed(page, jupyter, "jupyterlab-saved-live-reopened"):
        LAB.open(page, jupyter, path)
        view = cells(page).nth(1).locator(".nbd-run")
        view.locator(".nbd-live.nbd-disconnected").wait_for()
        assert view.locator(".nbd-badge").inner_text() == "completed"
        assert view.locator(".nbd-step").count() == STEPS + 1
        texts = view.locator(".nbd-step .nbd-text").all_inner_texts()
        assert texts[0] == "Looking at table t0 now." and texts[-1] == f"Done: {STEPS} tables."
        view.scroll_into_view_if_needed()
        shot(page, "jupyterlab-saved-live.png")
