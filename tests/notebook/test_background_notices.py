"""Background notices never land in whichever cell happens to run (a real kernel)."""

from __future__ import annotations

from pathlib import Path

from support.tiers import skip_without

skip_without("nbclient")  # found, not imported: the test imports it

LATER = """\
import asyncio, logging

async def later():
    await asyncio.sleep(0.2)
    logging.getLogger("nbdurable.runs").warning("nbdurable: renewing the lease failed")
    logging.getLogger("nbdurable.runs").error("run r1 taken over")

task = asyncio.get_running_loop().create_task(later())"""


def test_background_log_lines_go_to_a_file_not_the_running_cell(tmp_path: Path) -> None:
    import nbclient
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("%load_ext nbdurable"),
        nbformat.v4.new_code_cell(LATER),
        nbformat.v4.new_code_cell("await asyncio.sleep(0.6)\nprint('unrelated work')"),
    ]
    client = nbclient.NotebookClient(
        notebook, kernel_name="python3", timeout=60, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [o for cell in notebook.cells for o in cell.outputs]
    assert [o.get("text") for o in outputs] == ["unrelated work\n"]  # no red stderr anywhere
    log = (tmp_path / ".nbdurable" / "notebook.log").read_text()
    assert "WARNING nbdurable.runs: nbdurable: renewing the lease failed" in log
    assert "ERROR nbdurable.runs: run r1 taken over" in log
