"""Identical waiting calls share one line of the dashboard, with a confirmed bulk action.

Four runs wait to have the same call approved. The dashboard lists them as one
line (a count of 4, "4 runs") instead of four; **Approve all 4…** asks for a confirmation,
then every run completes (each verdict checked alone by the kernel). Screenshots
``dashboard-group.png``, ``dashboard-group-confirm.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .harness import Server
from .pages import LAB, diagnosed, enabled, run_cell, shot

SETUP = '''\
%load_ext nbdurable
import nbdurable as nd
from nbdurable.notebook import session

@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a warehouse table."""
    return f"dropped {name}"

janitor = nd.Agent(
    "janitor",
    nd.ScriptedModel([nd.Turn.call("drop_table", "Dropping.", name="stg"), "Dropped."] * 4),
    [drop_table],
    version="1",
)
runs = [session().submit(janitor, "Drop stg.", run_id=f"j{i}") for i in range(4)]
for run in runs:
    await run.wait("waiting_approval")
%durable dashboard'''


def test_four_identical_waiting_calls_are_one_line_approved_at_once(
    jupyter: Server, page: Any, folder: Path
) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)"}
    nbformat.write(nb, folder / "groups.ipynb")
    path = f"{folder.name}/groups.ipynb"
    with diagnosed(page, jupyter, "dashboard-groups"):
        LAB.open(page, jupyter, path)
        dash = run_cell(page, 0).locator(".nbd-dash")
        group = dash.locator(".nbd-dash-group")
        enabled(group.locator("button.nbd-dash-approve-all"), timeout=60)
        assert dash.locator(".nbd-dash-approval").count() == 1  # one line, not four
        assert group.locator(".nbd-dash-count").inner_text() == "× 4"
        assert group.locator(".nbd-dash-where").inner_text().startswith("4 runs")
        shot(page, "dashboard-group.png")
        group.locator("button.nbd-dash-approve-all").click()
        confirm = group.locator("button.nbd-dash-confirm")
        assert confirm.inner_text() == "Approve these 4 calls"  # nothing sent yet
        shot(page, "dashboard-group-confirm.png")
        confirm.click()
        for i in range(4):
            row = dash.locator(f"tr.nbd-dash-row[data-run-id='j{i}']")
            row.locator(".nbd-s-completed").wait_for(timeout=60_000)
