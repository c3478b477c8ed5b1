"""Executing the demo notebooks headless (nbclient, a real kernel) and reading their outputs.

Shared by every test that runs a notebook of ``notebooks/``; the callers skip
when nbformat, nbclient or ipykernel are missing. Every notebook is executed
twice in a row on the same folder (:func:`execute_twice`): a demo must run top
to bottom on a fresh store and on the one its previous run left.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from support.notebook_pace import set_stream_delay

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CELL_TIMEOUT = 120


def execute_twice(
    name: str, folder: Path, *, first_stream_delay: float | None = None
) -> tuple[Any, Any]:
    """Run ``name`` twice in a row at ``folder``, each time in a fresh kernel (Restart &
    Run All): the second run finds the store the first one left. Both must run cleanly.

    Args:
        name: The notebook, without ``.ipynb``.
        folder: Where ``notebooks/`` is copied and the kernel works.
        first_stream_delay: The scripted model's ``stream_delay`` in the first run
            (:func:`set_stream_delay`); the second runs at the notebook's own pace.

    Returns:
        The two executed notebooks, in order.
    """
    first = execute(name, folder, stream_delay=first_stream_delay)
    check_ran_cleanly(first, folder)
    second = execute(name, folder)
    check_ran_cleanly(second, folder)
    return first, second


def run_all_twice_in_one_kernel(
    name: str, folder: Path, *, stream_delay: float | None = None
) -> Any:
    """Run every cell of ``name`` twice in one kernel (Run All, then Run All again
    without a restart); each round must run cleanly. Returns the notebook as the
    second round left it. ``stream_delay``: as in :func:`execute`."""
    import nbclient
    import nbformat

    _copy_notebooks(folder, name, stream_delay)
    notebook = nbformat.read(folder / f"{name}.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(folder)}},
    )
    with client.setup_kernel():
        for _ in range(2):
            for index, cell in enumerate(notebook.cells):
                client.execute_cell(cell, index)
            check_ran_cleanly(notebook, folder)
    return notebook


def _copy_notebooks(folder: Path, name: str = "", stream_delay: float | None = None) -> None:
    for path in NOTEBOOKS.iterdir():
        if path.is_file() and path.suffix in (".ipynb", ".py"):
            shutil.copy(path, folder / path.name)
    if stream_delay is not None:
        set_stream_delay(folder / f"{name}.ipynb", stream_delay)


def execute(name: str, folder: Path, *, stream_delay: float | None = None) -> Any:
    """Run ``name`` in a copy of ``notebooks/`` at ``folder``; return the executed notebook.

    ``stream_delay`` replaces the notebook's scripted-model pace (:func:`set_stream_delay`).
    """
    import nbclient
    import nbformat

    _copy_notebooks(folder, name, stream_delay)
    notebook = nbformat.read(folder / f"{name}.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(folder)}},
    )
    client.execute()
    return notebook


def text_of(cell: Any) -> str:
    """Everything a code cell printed or returned, as text."""
    parts = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            parts.append(output["text"])
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
    return "".join(parts)


def everything(notebook: Any) -> str:
    """Every code cell's text output, in order."""
    return "\n".join(text_of(c) for c in notebook.cells if c.cell_type == "code")


def check_ran_cleanly(notebook: Any, folder: Path) -> None:
    """Every code cell ran, with no error and no stderr; the approval secret is in no output."""
    import nbformat

    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code)
    errors = [o for c in code for o in c.outputs if o["output_type"] == "error"]
    assert not errors, [f"{e['ename']}: {e['evalue']}" for e in errors]
    stderr = [o["text"] for c in code for o in c.outputs if o.get("name") == "stderr"]
    assert not stderr, stderr
    key = folder / ".nbdurable" / "approval.key"
    if key.exists():  # the secret never reaches outputs or widget state
        assert key.read_text().strip() not in nbformat.writes(notebook)
