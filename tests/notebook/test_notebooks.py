"""The demo notebooks (``notebooks/``) run top to bottom, headless, in a real kernel.

Each notebook is executed with nbclient in a temporary copy of ``notebooks/``
(the kernel's working directory, so ``.nbdurable/`` lands there), then checked:
no error output, every code cell ran, and the outputs that make its point (the
quickstart's run completed, the forged token was denied, ...). The committed
notebooks carry no outputs. The whole file takes about a minute.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable import inspect as ins

from .running import NOTEBOOKS, check_ran_cleanly, everything, execute

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("anywidget")
pytest.importorskip("matplotlib")

NAMES = [
    "01-quickstart",
    "02-approvals-and-signing",
    "03-crash-and-resume",
    "04-time-travel",
    "05-debug-a-stuck-run",
]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("NBDURABLE_APPROVAL_SECRET", raising=False)  # the 0600 file is shown
    monkeypatch.setenv("NBDURABLE_DEMO_AUTO_APPROVE", "1")  # nobody here to click Approve
    return tmp_path


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_is_clean_teaching_material(name: str) -> None:
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "outputs committed"
    assert notebook.cells[0].cell_type == "markdown"
    assert notebook.cells[0].source.startswith(f"# {name[:2]} · ")
    prose = [c for c in notebook.cells if c.cell_type == "markdown"]
    assert len(prose) * 2 >= len(code), "prose between the cells"
    assert max(len(c.source.splitlines()) for c in code) <= 30, "short cells"
    assert notebook.metadata.kernelspec.name == "python3"


def test_notebooks_readme_lists_every_notebook() -> None:
    readme = (NOTEBOOKS / "README.md").read_text()
    for name in NAMES:
        assert f"{name}.ipynb" in readme


def test_quickstart_streams_a_run_that_completes_after_one_approval(folder: Path) -> None:
    notebook = execute("01-quickstart", folder)
    check_ran_cleanly(notebook, folder)
    out = everything(notebook)
    assert "Done: I dropped stg_2023" in out
    assert "Completed at step 3" in out
    (agent_cell,) = [c for c in notebook.cells if c.source.startswith("%%agent")]
    assert "application/vnd.jupyter.widget-view+json" in agent_cell.outputs[0]["data"]
    store = nd.open_store(f"sqlite:///{folder}/.nbdurable/runs.db")
    try:
        runs = ins.runs(store)
        assert runs["status"].tolist() == ["completed"]
        assert ins.history(store, runs.index[0])["status"].tolist() == [
            "running",
            "running",
            "suspended",
            "completed",
        ]
    finally:
        store.close()


def test_approvals_and_signing_denies_a_forged_token(folder: Path) -> None:
    notebook = execute("02-approvals-and-signing", folder)
    check_ran_cleanly(notebook, folder)
    out = everything(notebook)
    assert "stg_2023: completed -> Tool said: dropped stg_2023" in out
    assert "orders: completed -> Tool said: Denied by user." in out
    assert "Tool said: Approval token missing, invalid, expired, or bound to another run." in out
    assert "agent_path: ('dba',)" in out
    assert "The DBA reports: Tool said: dropped stg_2023" in out
    assert "invalid token | waiting_approval" in out
    assert "http://127.0.0.1:8000/approve/" in out and "?token=v1." in out
    assert "approved | Tool said: dropped stg_2023" in out
    assert "mode 0o600" in out


def test_crash_and_resume_survives_a_restart_and_a_killed_worker(folder: Path) -> None:
    notebook = execute("03-crash-and-resume", folder)
    check_ran_cleanly(notebook, folder)
    out = everything(notebook)
    assert "0 checkpoint_saved" in out
    assert "pending; it goes on in this kernel" in out
    assert "worker killed during step 1 | run state: running" in out
    assert "is gone: the lease expired" in out
    assert out.count("Done: dropped stg_2023 and kept stg_2024") == 2
    store = nd.open_store(f"sqlite:///{folder}/.nbdurable/runs.db")
    try:
        runs = ins.runs(store)
        assert runs["status"].tolist() == ["completed", "completed"]
        assert runs["steps"].tolist() == [4, 4]
    finally:
        store.close()


def test_time_travel_forks_diffs_and_plots(folder: Path) -> None:
    notebook = execute("04-time-travel", folder)
    check_ran_cleanly(notebook, folder)
    out = everything(notebook)
    assert "-3days -> stg_2023 was read 3 days ago, so I am keeping it." in out
    assert "Understood: Keep every table this week." in out
    assert 'last_read_days": 410' in out and 'last_read_days": 3' in out
    code = [c for c in notebook.cells if c.cell_type == "code"]
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2


def test_debug_a_stuck_run_explains_and_unsticks_every_kind(folder: Path) -> None:
    notebook = execute("05-debug-a-stuck-run", folder)
    check_ran_cleanly(notebook, folder)
    out = everything(notebook)
    for said in (
        "Waiting for 1 approval(s) at step 2.",
        "Queued behind run-",
        "Needs a human: tool 'send_report'",
        "The model call failed; attempt 2 starts at",
        "Failed: model_retries_exhausted.",
        "is gone: the lease expired",
    ):
        assert said in out
    store = nd.open_store(f"sqlite:///{folder}/.nbdurable/runs.db")
    try:
        assert set(ins.runs(store)["status"]) == {"completed"}
    finally:
        store.close()
