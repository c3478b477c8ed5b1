"""notebooks/07-graphs-and-tasks runs top to bottom, headless, in a real kernel (issue 10).

Executed with nbclient in a temporary copy of ``notebooks/`` (the kernel's working
directory, so its ``.nbdurable/runs.db`` lands there); then the store it leaves
behind is checked: the graph completed after its approval, each node has its own
history, the paused node went on after the retry, and the task finished with its
owned runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import nbdurable as nd

from .running import NOTEBOOKS, check_ran_cleanly, everything, execute

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("pandas")

NOTEBOOK = NOTEBOOKS / "07-graphs-and-tasks.ipynb"


def test_the_committed_notebook_has_no_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_graphs_and_tasks_notebook_runs_headless(tmp_path: Path) -> None:
    """The graph waits for its approval, completes after it; per-node history; the
    paused dependent goes on after the retry; the task completes with owned runs."""
    notebook = execute(NOTEBOOK.stem, tmp_path)
    check_ran_cleanly(notebook, tmp_path)
    shown = everything(notebook)
    assert "'waiting_approval'" in shown
    assert "completed - Published on the blog." in shown
    assert "Result of market:\n[Summarize the market.]" in shown
    assert "needs_attention - needs_attention dependency_failed" in shown
    assert "[Review it.] - completed" in shown
    store = nd.open_store(f"sqlite:///{tmp_path / '.nbdurable' / 'runs.db'}")
    try:
        for node in ("market", "costs", "memo", "publish"):
            assert nd.inspect.history(store, f"memo-graph:{node}")["status"].iloc[-1] == "completed"
        runs = nd.inspect.runs(store)
        assert set(runs.loc[runs["graph_id"] == "memo-graph", "graph_status"]) == {"completed"}
        task = runs.loc["report-q3"]
        assert (task["kind"], task["status"], task["steps"]) == ("task", "completed", 2)
        owned = runs[runs["owner_run"] == "report-q3"]
        assert list(owned.index) == ["report-q3:write_sections:0", "report-q3:write_sections:1"]
    finally:
        store.close()
