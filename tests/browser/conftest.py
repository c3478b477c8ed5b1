"""One Chromium and one Jupyter server for every browser test; a fresh page per test.

The server (``jupyter lab``) serves JupyterLab and Notebook 7 from one root; each
test works in a folder of its own under it and ends its kernels when done, so
sharing the server is safe and saves its start-up (seconds) per test.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import (
    CHROMIUM_ARGS,
    Server,
    chromium_path,
    jupyter_lab,
    process_tree,
    stop_pids,
    voila,
)


def _need_chromium() -> str:
    executable = chromium_path()
    if executable is None:
        pytest.skip("Chromium is missing (apt-get install chromium; .ci/run installs it)")
    return executable


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One headless Chromium, stopped (with every process of it) at the end."""
    executable = _need_chromium()
    from playwright.sync_api import sync_playwright

    before = set(process_tree(os.getpid()))
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        started = set(process_tree(os.getpid())) - before  # the driver and Chromium
        try:
            yield chromium
        finally:
            chromium.close()
    stop_pids(started)


@pytest.fixture(scope="package")
def jupyter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A Jupyter server serving JupyterLab and Notebook 7 (each test has its own folder)."""
    _need_chromium()  # no server for tests that would skip anyway
    if importlib.util.find_spec("jupyterlab") is None:
        pytest.skip("JupyterLab is missing (pip install -e '.[notebook]')")
    root = tmp_path_factory.mktemp("jupyter") / "root"
    root.mkdir()
    with jupyter_lab(root) as server:
        yield server


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=2)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def folder(jupyter: Server, request: pytest.FixtureRequest) -> Iterator[Path]:
    """This test's folder under the server's root; its kernels are ended afterwards."""
    assert jupyter.root is not None
    path = jupyter.root / request.node.name.replace("[", "-").replace("]", "")
    path.mkdir()
    try:
        yield path
    finally:
        jupyter.shutdown_kernels()


VOILA_NOTEBOOK = '''\
import nbdurable as nd
from nbdurable.notebook import session
from nbdurable.notebook.widgets import RunWidget

@nd.tool
def count_rows(table: str) -> int:
    """Count a table's rows."""
    return 42

model = nd.ScriptedModel(
    [nd.Turn.call("count_rows", "Counting.", table="sales"), "sales has 42 rows."]
)
nb = session()
run = nb.submit(nd.Agent("counter", model, [count_rows], version="1"), "How big is sales?")
await run.result()
RunWidget(nb.runtime, run.run_id)
'''


@pytest.fixture(scope="package")
def voila_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server | None]:
    """Voilà on a notebook showing a finished run; None without Voilà.

    The first quickstart test asks for it too, so it starts then and is warm by
    the time its own test runs.
    """
    import nbformat

    _need_chromium()
    if importlib.util.find_spec("voila") is None:
        yield None
        return
    notebook_folder = tmp_path_factory.mktemp("voila") / "notebook"
    notebook_folder.mkdir()
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(VOILA_NOTEBOOK)]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    path = notebook_folder / "finished-run.ipynb"
    nbformat.write(notebook, path)
    with voila(path, wait=False) as server:
        yield server
