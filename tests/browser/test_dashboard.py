"""The runs dashboard in JupyterLab, in a real (headless) Chromium.

A notebook fills the default store with 32 runs (30 answered, one failed with a
long error, one waiting for an approval) and shows ``%durable dashboard``. The
test sees the approval on top and one page of runs with one-line rows, clicks
Approve in the approval's row and sees the run resume and complete in the table
(no Refresh: the table follows the store), opens the run's widget below with a
click on its row, sorts, filters and searches, looks at it in JupyterLab's dark
theme, and restarts the kernel: the dashboard says it is disconnected and its
buttons are off. Screenshots go to ``NBDURABLE_ARTIFACTS`` (default
``test-artifacts/``): ``dashboard-approval.png``, ``dashboard-completed.png``,
``dashboard-dark.png`` and ``dashboard-disconnected.png``.

Skipped only when Chromium or JupyterLab is missing; ``.ci/run`` installs both.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from .harness import (
    CHROMIUM_ARGS,
    Server,
    artifacts_dir,
    chromium_path,
    jupyter_lab,
    process_tree,
    stop_pids,
)

KERNEL_IDLE = "Python 3 (ipykernel) | Idle"
NOTEBOOK = "dashboard.ipynb"

DEMO = '''\
"""Agents and runs for the dashboard's browser test (imported by the notebook)."""
import nbdurable as nd
from nbdurable.notebook import session


@nd.tool
def lookup(table: str) -> dict:
    """Look a table up."""
    return {"table": table, "rows": 0}


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


janitor = nd.Agent(
    "janitor",
    nd.ScriptedModel(
        [
            nd.Turn.call("lookup", "Looking at stg_2023.", table="stg_2023"),
            nd.Turn.call("drop_table", "stg_2023 is empty.", name="stg_2023"),
            "Done: dropped stg_2023.",
        ],
        price_per_million=(3.0, 15.0),
    ),
    [lookup, drop_table],
    version="1",
)
greeter = nd.Agent("greeter", nd.ScriptedModel(["Hello!"]), version="1")
ERROR = "The warehouse refused the connection: " + "credentials expired for etl; " * 12
flaky = nd.Agent("flaky", nd.ScriptedModel(["never"], fail_on={1: RuntimeError(ERROR)}), version="1")


async def fill() -> None:
    """30 answered runs, one failed with a long error, two waiting for an approval."""
    nb = session()
    for i in range(30):
        await nb.submit(greeter, f"Say hello {i}.", run_id=f"hello-{i:02d}").result()
    nb.submit(flaky, "Load the warehouse.", run_id="load-warehouse")
    waiting = nb.submit(janitor, "Clean up the staging tables.", run_id="clean-up")
    await waiting.wait("waiting_approval")
    other = nb.submit(janitor, "Clean up the archive.", run_id="archive")
    await other.wait("waiting_approval")
'''
SETUP = "%load_ext nbdurable\nfrom dashboard_demo import fill\n\nawait fill()"


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
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, device_scale_factor=2)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        yield page
    finally:
        context.close()


def _notebook(root: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(SETUP),
        nbformat.v4.new_code_cell("%durable dashboard"),
    ]
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nbformat.write(notebook, root / NOTEBOOK)
    (root / "dashboard_demo.py").write_text(DEMO)


def _shot(target: Any, name: str) -> Path:
    path = artifacts_dir() / name
    target.screenshot(path=str(path))
    return path


@contextlib.contextmanager
def _diagnosed(page: Any, server: Server) -> Iterator[None]:
    """On a failure: a screenshot ``dashboard-failure.png`` and the server's log."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            print(f"screenshot: {_shot(page, 'dashboard-failure.png')}")
        print(f"--- {server.name} log (end) ---\n{server.log_tail()}")
        raise


def _menu(page: Any, menu: str, command: str, text: str | None = None, via: str = "") -> None:
    """Click ``menu`` in Lab's menu bar (then hover its submenu ``via``), then ``command``."""
    page.locator(".lm-MenuBar-itemLabel", has_text=menu).first.click()
    if via:
        page.locator("li.lm-Menu-item .lm-Menu-itemLabel", has_text=via).first.hover()
    item = page.locator(f"li.lm-Menu-item[data-command='{command}']")
    if text is not None:
        item = item.filter(has_text=text)
    item.first.click()


def _luminance(css_color: str) -> float:
    """Relative luminance (0 dark .. 1 light) of ``rgb(...)`` / ``rgba(...)``."""
    parts = css_color[css_color.index("(") + 1 : css_color.index(")")].split(",")
    r, g, b = (float(p) / 255 for p in parts[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_the_dashboard_approves_a_waiting_run_and_follows_it_in_jupyterlab(
    page: Any, tmp_path: Path
) -> None:
    if importlib.util.find_spec("jupyterlab") is None:
        pytest.skip("JupyterLab is missing (pip install -e '.[notebook]')")
    root = tmp_path / "root"
    root.mkdir()
    _notebook(root)
    with jupyter_lab(root) as lab, _diagnosed(page, lab):
        page.goto(lab.url(f"/lab/tree/{NOTEBOOK}"))
        page.get_by_role("button", name=KERNEL_IDLE).wait_for(timeout=60_000)
        lab.note_kernels()
        _menu(page, "Run", "runmenu:run-all")

        dash = page.locator(".nbd-dash")
        dash.wait_for(timeout=60_000)
        page.locator(".nbd-dash[data-kernel='live']").wait_for()
        approval = dash.locator(".nbd-dash-approval").filter(has_text="clean-up")
        approval.wait_for()
        assert dash.locator(".nbd-dash-approval").count() == 2
        assert approval.locator(".nbd-dash-call").inner_text() == 'drop_table(name="stg_2023")'
        assert approval.locator(".nbd-dash-run-link").inner_text() == "clean-up"
        approve = approval.locator("button.nbd-dash-approve")
        assert approve.is_enabled()

        # one page of runs, each on one line; the long error is cut, whole on hover
        rows = dash.locator(".nbd-dash-table tbody tr")
        assert rows.count() == 25
        assert "of 33" in dash.locator(".nbd-dash-page-info").inner_text()
        assert rows.first.get_attribute("data-run-id") == "archive"  # newest first
        failed = dash.locator("tr[data-run-id='load-warehouse']")
        reason = failed.locator("td.nbd-c-reason")
        assert reason.inner_text().startswith("model_error: RuntimeError: The warehouse")
        assert reason.get_attribute("title").strip().endswith("credentials expired for etl;")
        heights = {round(r.bounding_box()["height"]) for r in rows.all()}
        assert max(heights) <= 30, f"rows are not one line each: {heights}"
        assert "<NA>" not in dash.inner_text()
        dash.scroll_into_view_if_needed()
        _shot(dash, "dashboard-approval.png")

        approve.click()
        dash.locator(".nbd-dash-approval.nbd-dash-a-approved").wait_for()
        outcome = approval.locator(".nbd-dash-outcome").inner_text()
        assert outcome.startswith("approved"), outcome

        # Deny asks for a reason in the row; Enter sends it, the model reads it
        other = dash.locator(".nbd-dash-approval").filter(has_text="archive")
        other.locator("button.nbd-dash-deny").click()
        reason_input = other.locator("input.nbd-dash-reason")
        reason_input.wait_for()
        assert reason_input.evaluate("(el) => el === document.activeElement")
        page.keyboard.type("keep it for the audit")
        page.keyboard.press("Enter")
        other.locator(".nbd-dash-outcome", has_text="keep it for the audit").wait_for()
        assert "nbd-dash-a-denied" in (other.get_attribute("class") or "")
        # no Refresh click: the table follows the store
        done = dash.locator("tr[data-run-id='clean-up'] .nbd-dash-badge.nbd-s-completed")
        done.wait_for()
        assert approve.count() == 0 or approve.is_hidden()

        # a click on the row shows the run's live widget below the dashboard
        dash.locator("tr[data-run-id='clean-up']").click()
        run_view = page.locator(".nbd-run").first
        run_view.wait_for()
        run_view.locator(".nbd-badge.nbd-status-completed").wait_for()
        assert "below: live view of clean-up" in dash.locator(".nbd-dash-detail").inner_text()
        dash.locator("tr.nbd-dash-selected[data-run-id='clean-up']").wait_for()

        # sort, filter, search: the kernel sends the page asked for
        dash.locator("th.nbd-c-cost").click()  # ascending: the cheapest first, blanks last
        dash.locator("th.nbd-c-cost .nbd-dash-arrow").wait_for()
        page.wait_for_function(
            "() => ['clean-up', 'archive'].includes("
            "document.querySelector('.nbd-dash tbody tr').dataset.runId)"
        )
        costs = [c.strip() for c in dash.locator("td.nbd-c-cost").all_inner_texts()]
        assert costs[0].startswith("$") and costs[2:] == [""] * (len(costs) - 2), costs
        dash.locator("select.nbd-dash-status").select_option("failed")
        page.wait_for_function("() => document.querySelectorAll('.nbd-dash tbody tr').length === 1")
        assert rows.first.get_attribute("data-run-id") == "load-warehouse"
        dash.locator("select.nbd-dash-status").select_option("")
        dash.locator("input.nbd-dash-search").fill("hello-2")
        page.wait_for_function(
            "() => document.querySelectorAll('.nbd-dash tbody tr').length === 10"
        )
        _shot(page, "dashboard-completed.png")

        # JupyterLab's dark theme: light text on a dark background
        _menu(page, "Settings", "apputils:change-theme", "JupyterLab Dark", via="Theme")
        page.wait_for_selector("body[data-jp-theme-light='false']", state="attached")
        page.wait_for_timeout(500)
        colors = dash.evaluate(
            "(el) => { const s = getComputedStyle(el); const c = el.querySelector('td');"
            " return [s.color, s.backgroundColor, getComputedStyle(c).color]; }"
        )
        assert _luminance(colors[0]) > 0.6 and _luminance(colors[2]) > 0.6, colors
        assert _luminance(colors[1]) < 0.3, colors
        _shot(dash, "dashboard-dark.png")

        # the kernel restarts: the dashboard says so and its buttons are off
        _menu(page, "Kernel", "kernelmenu:restart")
        page.locator(".jp-Dialog button.jp-mod-accept").click()
        page.locator(".nbd-dash[data-kernel='disconnected']").wait_for(timeout=30_000)
        assert "disconnected" in dash.locator(".nbd-dash-live").inner_text()
        assert dash.locator("button.nbd-dash-refresh").is_disabled()
        assert dash.locator("td.nbd-k-actions button").first.is_disabled()
        assert dash.locator("select.nbd-dash-status").is_disabled()
        _shot(dash, "dashboard-disconnected.png")
