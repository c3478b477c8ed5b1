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
"""

from __future__ import annotations

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
    restart_kernel,
    run_cell,
    set_theme,
    shot,
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
