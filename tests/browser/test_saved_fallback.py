"""A saved notebook reopened without a kernel (nbviewer's HTML) shows the run, in Chromium.

Screenshot (``test-artifacts/``): ``SAVED-run-fallback.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.tiers import skip_without

from .pages import shot

skip_without("nbclient")  # found, not imported: the test imports it
skip_without("nbconvert")

SETUP = '''\
%load_ext nbdurable
import asyncio
import nbdurable as nd
from nbdurable.notebook import session

@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"

model = nd.ScriptedModel([nd.Turn.call("drop_table", "Dropping stg_2023.", name="stg_2023")])
janitor = nd.Agent("janitor", model, [drop_table], version="1")'''


def test_a_saved_notebook_without_widget_state_shows_the_run(browser: Any, tmp_path: Path) -> None:
    import nbclient
    import nbconvert
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(SETUP),
        nbformat.v4.new_code_cell("%%agent janitor --run-id r1\nDrop the stale table."),
        nbformat.v4.new_code_cell(
            'await session().run("r1").wait("waiting_approval")\nawait asyncio.sleep(0.5)'
        ),
    ]
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=120,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    # as GitHub or nbviewer get it: the file, without a kernel and without widget state
    notebook.metadata.pop("widgets", None)
    page_html, _ = nbconvert.HTMLExporter().from_notebook_node(notebook)
    path = tmp_path / "saved.html"
    path.write_text(page_html)
    page = browser.new_page()
    try:
        page.goto(path.as_uri())
        fallback = page.locator(".nbdurable-fallback")
        fallback.wait_for()
        text = fallback.inner_text()
        assert "nbdurable run r1: waiting_approval" in text
        assert "drop_table(name='stg_2023')" in text and "Dropping stg_2023." in text
        assert "object at 0x" not in page.content()
        shot(fallback, "SAVED-run-fallback.png")
    finally:
        page.close()
