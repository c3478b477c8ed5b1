"""The run widget's state saved in an executed notebook: what a reopened notebook shows.

The widget follows its run in a task started by the cell that made it; its updates
must still land in the notebook that nbclient (or ``nbconvert --execute``) saves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

SETUP = '''\
%load_ext nbdurable
import nbdurable as nd

@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"

model = nd.ScriptedModel([nd.Turn.call("drop_table", "Dropping stg_2023.", name="stg_2023"), "Done."])
janitor = nd.Agent("janitor", model, [drop_table], version="1")'''

WAIT = """\
import asyncio
from nbdurable.notebook import session
run = session().run("r1")
await run.wait("waiting_approval")
await asyncio.sleep(2)  # the widget's update after the run stopped, while this cell runs
# (0.5 s was once too short on a loaded CI worker: the saved status read "unknown")"""
# nbclient keeps only messages of the cell it runs: what a widget sends once the
# last cell ended is in no saved notebook, whatever the widget does


def saved_notebook(folder: Path) -> Any:
    """Execute setup, ``%%agent`` (a run that waits for approval) and a waiting cell."""
    nbclient = pytest.importorskip("nbclient")
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(SETUP),
        nbformat.v4.new_code_cell("%%agent janitor --run-id r1\nDrop the stale table."),
        nbformat.v4.new_code_cell(WAIT),
    ]
    client = nbclient.NotebookClient(
        notebook, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(folder)}}
    )
    client.execute()
    return notebook


def run_widget_states(notebook: Any) -> list[dict[str, Any]]:
    saved = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    return [m["state"] for m in saved.values() if m["state"].get("run_id") == "r1"]


def test_an_executed_notebook_saves_the_run_widget_as_the_run_last_looked(
    tmp_path: Path,
) -> None:
    import nbformat

    notebook = saved_notebook(tmp_path)
    (state,) = run_widget_states(notebook)
    assert state["status"] == "waiting_approval"
    assert state["summary"] == "waiting for approval: drop_table"
    assert state["progress"].startswith("1 step (budget 20)")
    (card,) = state["approvals"]
    assert (card["tool_name"], card["state"]) == ("drop_table", "pending")
    # the steps ride deltas live; the saved state holds them all in the snapshot trait
    (step,) = state["snapshot"]["steps"]
    assert step["text"] == "Dropping stg_2023."
    assert step["tool_calls"][0]["tool_name"] == "drop_table"
    assert "text" not in state and "steps" not in state
    secret = (tmp_path / ".nbdurable" / "approval.key").read_text().strip()
    assert secret not in nbformat.writes(notebook)


def widget_output(cell: Any) -> dict[str, Any]:
    (output,) = [o for o in cell.outputs if "application/vnd.jupyter.widget-view+json" in o.data]
    return dict(output.data)


def test_a_saved_run_widget_output_says_what_the_run_is_without_a_kernel(tmp_path: Path) -> None:
    import nbformat

    notebook = nbformat.reads(nbformat.writes(saved_notebook(tmp_path)), as_version=4)
    data = widget_output(notebook.cells[1])
    # GitHub, nbviewer or a kernel-less JupyterLab show these instead of the widget
    plain, page = data["text/plain"], data["text/html"]
    assert "object at 0x" not in plain and "RunWidget" not in plain
    assert plain.startswith("nbdurable run r1: waiting_approval")
    assert "waiting for approval: drop_table" in plain
    assert "drop_table(name='stg_2023')" in plain and "Dropping stg_2023." in plain
    assert "<b>nbdurable run <code>r1</code>: waiting_approval</b>" in page
    assert "<code>drop_table(name=&#x27;stg_2023&#x27;)</code>" in page


def test_a_saved_completed_run_shows_its_answer(tmp_path: Path) -> None:
    import nbclient
    import nbformat

    notebook = nbformat.v4.new_notebook()
    greeter = 'greeter = nd.Agent("greeter", nd.ScriptedModel(["Hello, <world>!"]), version="1")'
    wait = WAIT.replace('"waiting_approval"', '"completed"').replace("r1", "r2")
    notebook.cells = [
        nbformat.v4.new_code_cell(SETUP + "\n" + greeter),
        nbformat.v4.new_code_cell("%%agent greeter --run-id r2\nSay hello."),
        nbformat.v4.new_code_cell(wait),
    ]
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=120,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    data = widget_output(nbformat.reads(nbformat.writes(notebook), as_version=4).cells[1])
    assert data["text/plain"].startswith("nbdurable run r2: completed")
    assert data["text/plain"].endswith("Hello, <world>!")
    assert (
        "Hello, &lt;world&gt;!" in data["text/html"]
        and "waiting for approval" not in data["text/html"]
    )
