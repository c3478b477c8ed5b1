"""notebooks/07-graphs-and-tasks runs top to bottom, headless, in a real kernel (issue 10).

Executed twice in a row with nbclient in a temporary copy of ``notebooks/`` (the
kernel's working directory, so its ``.nbdurable/07-graphs.db`` lands there); then
the store it leaves behind is checked: the graph completed after its approval, each node has its own
history, the paused node went on after the retry, and the task finished with its
owned runs.
"""

from __future__ import annotations

from pathlib import Path

from support.tiers import skip_without

import nbdurable as nd

from .running import NOTEBOOKS, everything, execute_twice

for _module in ("nbformat", "nbclient", "ipykernel", "pandas"):
    skip_without(_module)  # found, not imported: the tests import what they use

NOTEBOOK = NOTEBOOKS / "07-graphs-and-tasks.ipynb"


def test_the_committed_notebook_has_no_outputs() -> None:
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_graphs_and_tasks_notebook_runs_headless_twice_on_its_own_store(tmp_path: Path) -> None:
    """The graph waits for its approval, completes after it; per-node history; the
    paused dependent goes on after the retry; the task completes with owned runs.
    A second Restart & Run All on the same store does it all again."""
    for notebook in execute_twice(NOTEBOOK.stem, tmp_path):
        shown = everything(notebook)
        assert "'waiting_approval'" in shown
        assert "completed - Published on the blog." in shown
        assert "Result of market:\n[Summarize the market.]" in shown
        assert "needs_attention - needs_attention dependency_failed" in shown
        assert "[Review it.] - completed" in shown
    assert not (tmp_path / ".nbdurable" / "runs.db").exists()  # its own store only
    store = nd.open_store(f"sqlite:///{tmp_path / '.nbdurable' / '07-graphs.db'}")
    try:
        runs = nd.inspect.runs(store)
        memos = sorted(g for g in set(runs["graph_id"].dropna()) if g.startswith("memo-"))
        assert len(memos) == 2
        for graph_id in memos:
            for node in ("market", "costs", "memo", "publish"):
                steps = nd.inspect.history(store, f"{graph_id}:{node}")
                assert steps["status"].iloc[-1] == "completed"
            assert set(runs.loc[runs["graph_id"] == graph_id, "graph_status"]) == {"completed"}
        tasks = runs[runs["kind"] == "task"]
        assert len(tasks) == 2
        for task_id, task in tasks.iterrows():
            assert (task["agent"], task["status"], task["steps"]) == ("report", "completed", 2)
            owned = runs[runs["owner_run"] == task_id]
            assert list(owned.index) == [
                f"{task_id}:write_sections:0",
                f"{task_id}:write_sections:1",
            ]
    finally:
        store.close()
