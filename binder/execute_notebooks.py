"""Execute every notebook of a folder headless, each in a temporary copy of the folder.

Run with the Python whose kernel should execute them (binder/verify.sh uses the
Binder virtual environment's): ``python binder/execute_notebooks.py notebooks/``.
Exits 1 when a cell fails or prints an error.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(notebook_path: Path) -> list[str]:
    """Run one notebook in a temporary copy of its folder; the problems found."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for path in notebook_path.parent.iterdir():
            if path.is_file():
                shutil.copy(path, folder / path.name)
        notebook = nbformat.read(folder / notebook_path.name, as_version=4)
        client = NotebookClient(
            notebook,
            kernel_name="python3",
            timeout=180,
            resources={"metadata": {"path": str(folder)}},
        )
        try:
            client.execute()
        except Exception as exc:  # a failing cell: report it, go on with the others
            return [f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"]
        problems = []
        for cell in notebook.cells:
            for output in cell.get("outputs", []):
                if output["output_type"] == "error":
                    problems.append(f"{output['ename']}: {output['evalue']}")
                elif output.get("name") == "stderr":
                    problems.append(f"stderr: {output['text'].strip()}")
        return problems


def check_kernel() -> str:
    """The kernel is this Python's, and imports an installed nbdurable (not a checkout)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "import sys, nbdurable; print(sys.prefix); print(nbdurable.__file__)"
        )
    ]
    with tempfile.TemporaryDirectory() as tmp:
        NotebookClient(
            notebook, kernel_name="python3", resources={"metadata": {"path": tmp}}
        ).execute()
    prefix, module = notebook.cells[0].outputs[0]["text"].split()
    if prefix != sys.prefix or not module.startswith(sys.prefix):
        raise SystemExit(f"the kernel is not this environment's: {prefix}, {module}")
    return module


def main() -> int:
    """Execute every ``*.ipynb`` in the folder given (default ``notebooks``)."""
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "notebooks")
    failed = 0
    print(f"python {sys.version.split()[0]} at {sys.executable}")
    print(f"kernel imports {check_kernel()}")
    for path in sorted(folder.glob("*.ipynb")):
        start = time.monotonic()
        problems = execute(path)
        status = "ok" if not problems else "FAILED"
        print(f"{path.name}: {status} ({time.monotonic() - start:.1f} s)", flush=True)
        for problem in problems:
            print(f"  {problem}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
