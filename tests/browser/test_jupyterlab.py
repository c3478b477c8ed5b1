"""The notebook as its users meet it: JupyterLab and Voilà in a real (headless) Chromium.

JupyterLab serves a temporary copy of ``notebooks/``; the test opens
``01-quickstart.ipynb``, waits for the kernel, runs the cells down to
``%%agent``, sees the run widget's text stream in, clicks Approve on the approval
card, sees the run complete, then runs the rest of the notebook without an error. Voilà renders a small notebook holding the run widget of a finished run.
Screenshots go to ``NBDURABLE_ARTIFACTS`` (default ``test-artifacts/``):
``jupyterlab-approval.png`` (the page, card showing), ``run-widget-approval.png``
(the cell and its widget only: the README's picture, ``docs/img/``),
``jupyterlab-completed.png`` and ``voila-run-widget.png``.

Skipped only when Chromium or JupyterLab (Voilà, for its test) is missing;
``.ci/run`` installs both.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from .harness import (
    CHROMIUM_ARGS,
    REPO,
    Server,
    artifacts_dir,
    chromium_path,
    jupyter_lab,
    process_tree,
    stop_pids,
    voila,
)

NOTEBOOKS = REPO / "notebooks"
QUICKSTART = "01-quickstart.ipynb"
KERNEL_IDLE = "Python 3 (ipykernel) | Idle"

# Records, in the page, the run widget's text each time it changes before the
# approval card shows, and whether a step was still streaming (partial text shown).
RECORD_TEXT = """() => {
  window.__nbdTexts = [];
  const note = () => {
    if (document.querySelector('.nbd-run .nbd-card')) return;
    const texts = [...document.querySelectorAll('.nbd-run .nbd-text')];
    const length = texts.reduce((n, t) => n + t.textContent.length, 0);
    const streaming = !!document.querySelector('.nbd-run .nbd-text.nbd-streaming');
    const last = window.__nbdTexts[window.__nbdTexts.length - 1];
    if (length && (!last || last.length !== length || last.streaming !== streaming)) {
      window.__nbdTexts.push({length, streaming});
    }
  };
  new MutationObserver(note).observe(document.body,
    {subtree: true, childList: true, characterData: true, attributes: true});
}"""

FIND_AGENT_CELL = """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].findIndex(
  (c) => c.classList.contains('jp-CodeCell') &&
    c.querySelector('.jp-InputArea-editor').textContent.trim().startsWith('%%agent'))"""

ALL_RAN = """() => {
  const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
  return prompts.length > 0 && prompts.every((p) => /^\\[\\d+\\]:$/.test(p.textContent.trim()));
}"""


def _need_chromium() -> str:
    path = chromium_path()
    if path is None:
        pytest.skip("Chromium is missing (apt-get install chromium; .ci/run installs it)")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module, stopped (with every process of it) at the end."""
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


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=2)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        context.close()


def _served_notebooks(tmp_path: Path) -> Path:
    """A copy of ``notebooks/`` (the quickstart and any module beside it): Lab autosaves into it."""
    if not (NOTEBOOKS / QUICKSTART).is_file():
        pytest.fail(f"{NOTEBOOKS / QUICKSTART} is missing")
    root = tmp_path / "root"
    shutil.copytree(
        NOTEBOOKS,
        root,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", ".nbdurable", "*.db*", "__pycache__"),
    )
    return root


def _shot(page_or_element: Any, name: str) -> Path:
    path = artifacts_dir() / name
    page_or_element.screenshot(path=str(path))
    return path


def _errors(page: Any) -> list[str]:
    """The text of every error output in the notebook (tracebacks)."""
    selector = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']"
    return [e.inner_text() for e in page.locator(selector).all()]


class _Clock:
    """Prints how long each phase of a test took (shown with ``-s`` or on a failure)."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, phase: str) -> None:
        print(f"{time.monotonic() - self.start:6.1f}s  {phase}")


@contextlib.contextmanager
def _diagnosed(page: Any, server: Server, name: str) -> Iterator[None]:
    """On a failure: a screenshot ``NAME-failure.png`` and the server's log in the report."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            print(f"screenshot: {_shot(page, f'{name}-failure.png')}")
        print(f"--- {server.name} log (end) ---\n{server.log_tail()}")
        raise


def _run_menu(page: Any, command: str) -> None:
    """Click Run > the item of ``command`` (``notebook:run-all-above``...) in Lab's menu bar."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(f"li.lm-Menu-item[data-command='{command}']").click()


@pytest.mark.usefixtures("voila_server")  # started now, ready by its own test
def test_quickstart_streams_asks_for_approval_and_completes_in_jupyterlab(
    page: Any, tmp_path: Path
) -> None:
    """The quickstart as a first-time user runs it: cell by cell, clicking Approve.

    Not Run All: the cell after ``%%agent`` approves from code as soon as the run
    waits (so the notebook also finishes headless). The test runs every cell down
    to the ``%%agent`` one, clicks Approve on the card, waits for the run to
    complete, then runs the rest, which finds nothing left to approve.
    """
    if importlib.util.find_spec("jupyterlab") is None:
        pytest.skip("JupyterLab is missing (pip install -e '.[notebook]')")
    clock = _Clock()
    root = _served_notebooks(tmp_path)
    with jupyter_lab(root) as lab, _diagnosed(page, lab, "jupyterlab"):
        clock("JupyterLab answers")
        page.goto(lab.url(f"/lab/tree/{QUICKSTART}"))
        page.get_by_role("button", name=KERNEL_IDLE).wait_for(timeout=60_000)
        lab.note_kernels()
        clock("notebook open, kernel idle")
        page.evaluate(RECORD_TEXT)

        cells = page.locator(".jp-Notebook .jp-Cell")
        agent_at = page.evaluate(FIND_AGENT_CELL)
        assert agent_at >= 0, "no %%agent cell in the quickstart"
        agent_cell = cells.nth(agent_at)
        agent_cell.locator(".jp-InputPrompt").click()
        _run_menu(page, "notebook:run-all-above")
        _run_menu(page, "notebook:run-cell")

        # the run widget appears, its text streams in, then the approval card
        widget = agent_cell.locator(".nbd-run")
        widget.wait_for()
        card = widget.locator(".nbd-card").first
        approve = card.locator("button.nbd-approve")
        approve.wait_for()
        page.wait_for_function(
            "() => { const b = document.querySelector('.nbd-run .nbd-card button.nbd-approve');"
            " return b && !b.disabled; }"
        )
        clock("text streamed, approval card shown")
        badge = widget.locator(".nbd-badge")
        assert badge.inner_text() == "waiting_approval"
        assert "(" in card.locator(".nbd-card-call").inner_text()  # tool(args...)
        samples = page.evaluate("() => window.__nbdTexts")
        lengths = [s["length"] for s in samples]
        assert len(set(lengths)) >= 2 and lengths == sorted(lengths), (
            f"the text did not grow on screen (lengths seen: {lengths})"
        )
        assert any(s["streaming"] for s in samples), (
            f"no partial text was ever shown, only whole steps: {samples}"
        )

        agent_cell.scroll_into_view_if_needed()
        _shot(page, "jupyterlab-approval.png")
        _shot(agent_cell, "run-widget-approval.png")

        approve.click()

        # the kernel verifies the signed token and resumes: the run completes
        widget.locator(".nbd-badge.nbd-status-completed").wait_for()
        widget.locator(".nbd-card.nbd-card-approved").wait_for()
        assert approve.is_disabled()
        assert widget.locator(".nbd-card-outcome").inner_text().startswith("approved")
        texts = widget.locator(".nbd-step .nbd-text").all_inner_texts()
        final = texts[-1].strip()
        assert final and len(texts) >= 2, texts
        clock("approved in the browser, run completed")
        _shot(page, "jupyterlab-completed.png")

        # the rest of the notebook: nothing left to approve, the run's text printed
        cells.nth(agent_at + 1).locator(".jp-InputPrompt").click()
        _run_menu(page, "notebook:run-all-below")
        page.wait_for_function(ALL_RAN, timeout=60_000)
        page.get_by_role("button", name=KERNEL_IDLE).wait_for()
        clock("the rest of the notebook ran")
        assert _errors(page) == []
        printed = page.locator(
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stdout']"
        )
        assert any(final in text for text in printed.all_inner_texts()), final


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


@pytest.fixture(scope="module")
def voila_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server | None]:
    """Voilà on a notebook showing a finished run; None without Voilà.

    Started with the module (the JupyterLab test asks for it too), so it is up
    and warm by the time its own test runs.
    """
    if importlib.util.find_spec("voila") is None:
        yield None
        return
    folder = tmp_path_factory.mktemp("voila") / "notebook"
    folder.mkdir()
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(VOILA_NOTEBOOK)]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    path = folder / "finished-run.ipynb"
    nbformat.write(notebook, path)
    with voila(path, wait=False) as server:
        yield server


def test_the_run_widget_renders_in_voila(page: Any, voila_server: Server | None) -> None:
    if voila_server is None:
        pytest.skip("Voilà is missing (pip install -e '.[dev]')")
    server = voila_server.ready()
    with _diagnosed(page, server, "voila"):
        page.goto(server.url("/"), timeout=60_000)
        widget = page.locator(".nbd-run").first
        widget.wait_for(timeout=60_000)
        server.note_kernels()
        page.wait_for_selector(".nbd-run .nbd-badge.nbd-status-completed")
        texts = widget.locator(".nbd-step .nbd-text").all_inner_texts()
        assert texts[-1] == "sales has 42 rows.", texts
        assert 'count_rows(table="sales")' in widget.locator(".nbd-tool-summary").inner_text()
        _shot(page, "voila-run-widget.png")
