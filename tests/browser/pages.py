"""Driving a notebook in JupyterLab or Notebook 7 as a person does: menus, cells, widgets.

Both front ends are built from JupyterLab's components, so cells, outputs and the
Run and Kernel menus are the same; they differ in their URL and in where they say
the kernel is idle.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.notebook_pace import set_stream_delay

from .harness import REPO, Server, artifacts_dir

NOTEBOOKS = REPO / "notebooks"
QUICKSTART = "01-quickstart.ipynb"
KERNEL_IDLE = "Python 3 (ipykernel) | Idle"
CLOCK_TIME = r"\d\d:\d\d"
KERNEL_DIED = "appears to have died"


@dataclass(frozen=True)
class Frontend:
    """JupyterLab (``jupyterlab``) or Notebook 7 (``notebook7``)."""

    name: str

    def open(self, page: Any, server: Server, path: str) -> None:
        """Open the notebook at ``path`` (under the server's root) and wait for its kernel.

        Skips the test when Notebook 7 is asked for and not installed.
        """
        if self.name == "notebook7":
            try:
                importlib.metadata.version("notebook")  # the distribution: tests/notebook shadows
            except importlib.metadata.PackageNotFoundError:
                pytest.skip("Notebook 7 is missing (pip install --group dev -e .)")
        if self.name == "jupyterlab":
            # a workspace of its own: Lab reopens no tab of an earlier test
            workspace = f"t{uuid.uuid4().hex[:8]}"
            page.goto(server.url(f"/lab/workspaces/{workspace}/tree/{path}?reset"))
        else:
            page.goto(server.url(f"/notebooks/{path}"))
        self.wait_idle(page, server, path)

    def wait_idle(self, page: Any, server: Server, path: str, timeout: float = 60.0) -> None:
        """Wait until the front end says the notebook's kernel is idle."""
        if self.name == "jupyterlab":
            # the status bar, not the toolbar: the toolbar says idle too early
            page.get_by_role("button", name=KERNEL_IDLE).wait_for(timeout=timeout * 1000)
        else:
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(
                timeout=timeout * 1000
            )
            deadline = time.monotonic() + timeout
            while server.kernel_state(path) != "idle":
                assert time.monotonic() < deadline, f"the kernel of {path} is not idle"
                time.sleep(0.2)
        server.note_kernels()


LAB = Frontend("jupyterlab")
NOTEBOOK7 = Frontend("notebook7")


def served_quickstart(folder: Path, stream_delay: float | None = None) -> Path:
    """A copy of ``notebooks/`` in ``folder`` (the front end autosaves into it).

    ``stream_delay``: the quickstart model's pace in the copy, when not its own.
    """
    if not (NOTEBOOKS / QUICKSTART).is_file():
        raise AssertionError(f"{NOTEBOOKS / QUICKSTART} is missing")
    shutil.copytree(
        NOTEBOOKS,
        folder,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", ".nbdurable", "*.db*", "__pycache__"),
        dirs_exist_ok=True,
    )
    if stream_delay is not None:
        set_stream_delay(folder / QUICKSTART, stream_delay)
    return folder / QUICKSTART


def cells(page: Any) -> Any:
    """Every cell of the open notebook."""
    return page.locator(".jp-Notebook .jp-Cell")


def cell_starting(page: Any, prefix: str) -> int:
    """The index of the first code cell whose source starts with ``prefix``."""
    index: int = page.evaluate(
        """(prefix) => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].findIndex(
          (c) => c.classList.contains('jp-CodeCell') &&
            c.querySelector('.jp-InputArea-editor').textContent.trim().startsWith(prefix))""",
        prefix,
    )
    assert index >= 0, f"no code cell starts with {prefix!r}"
    return index


def cell_containing(page: Any, text: str) -> int:
    """The index of the first code cell whose source contains ``text``."""
    index: int = page.evaluate(
        """(text) => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].findIndex(
          (c) => c.classList.contains('jp-CodeCell') &&
            c.querySelector('.jp-InputArea-editor').textContent.includes(text))""",
        text,
    )
    assert index >= 0, f"no code cell contains {text!r}"
    return index


def select(page: Any, index: int) -> Any:
    """Select cell ``index`` (a click on its prompt) and return it."""
    cell = cells(page).nth(index)
    cell.locator(".jp-InputPrompt").click()
    return cell


def menu(page: Any, title: str, command: str) -> None:
    """Click the menu bar's ``title`` menu, then the item of ``command``."""
    page.locator(".lm-MenuBar-itemLabel", has_text=title).first.click()
    page.locator(f"li.lm-Menu-item[data-command='{command}']").first.click()


def run_all(page: Any, server: Server, until: Any) -> None:
    """Run > Run All Cells, then wait (60 s) until the locator ``until`` shows.

    A kernel that dies meanwhile (the front end's "appears to have died" dialog)
    fails the test at once, with the server's log: the kernels' startup file
    (``KERNEL_STARTUP`` in ``harness.py``) writes there how the kernel's main
    loop ended.
    """
    died = page.get_by_text(KERNEL_DIED)
    menu(page, "Run", "runmenu:run-all")
    until.or_(died).first.wait_for(timeout=60_000)
    if died.is_visible():
        pytest.fail(f"the kernel died during Run All:\n{server.log_tail()}", pytrace=False)


def run_cell(page: Any, index: int) -> Any:
    """Run cell ``index`` (Run > Run Selected Cell) and return it."""
    cell = select(page, index)
    menu(page, "Run", "notebook:run-cell")
    return cell


def add_cell_at_end(page: Any, source: str) -> Any:
    """Type a new code cell below the last one, run it and return it."""
    last = cells(page).count() - 1
    select(page, last)
    page.keyboard.press("b")  # insert below, in command mode
    page.keyboard.press("Enter")  # edit it
    page.keyboard.type(source)
    page.keyboard.press("Shift+Enter")
    return cells(page).nth(last + 1)


def restart_kernel(page: Any) -> None:
    """Kernel > Restart Kernel..., then Restart in the dialog."""
    menu(page, "Kernel", "kernelmenu:restart")
    page.locator(".jp-Dialog-button.jp-mod-accept").click()


def enabled(button: Any, timeout: float = 30.0) -> None:
    """Wait until ``button`` (a locator) is there and enabled (views re-render their buttons)."""
    from playwright.sync_api import expect

    expect(button).to_be_enabled(timeout=timeout * 1000)


def errors(page: Any) -> list[str]:
    """The text of every error output in the notebook (tracebacks)."""
    selector = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']"
    return [e.inner_text() for e in page.locator(selector).all()]


def stdout(page: Any) -> list[str]:
    """Everything the cells printed, one entry per output."""
    selector = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stdout']"
    return [str(text) for text in page.locator(selector).all_inner_texts()]


def shot(page_or_element: Any, name: str) -> Path:
    """A screenshot into ``test-artifacts/`` (``NBDURABLE_ARTIFACTS``)."""
    path = artifacts_dir() / name
    page_or_element.screenshot(path=str(path))
    return path


def matches(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text) is not None


# The WCAG contrast ratio of every piece of text in the element, against the
# background it is drawn on (transparent layers composed down to an opaque one).
# Disabled controls are exempt, as in WCAG.
CONTRASTS = """(root) => {
  const parse = (c) => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return { r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1 };
  };
  const over = (top, below) => ({
    r: top.r * top.a + below.r * (1 - top.a), g: top.g * top.a + below.g * (1 - top.a),
    b: top.b * top.a + below.b * (1 - top.a), a: 1,
  });
  const background = (el) => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; }
    }
    let bg = { r: 255, g: 255, b: 255, a: 1 };
    for (const layer of layers.reverse()) bg = over(layer, bg);
    return bg;
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
  };
  const found = [];
  for (const el of [root, ...root.querySelectorAll("*")]) {
    if (el.closest("button:disabled, input:disabled")) continue;
    const text = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent.trim()).join("");
    if (!text || !el.getClientRects().length) continue;
    const bg = background(el);
    const fg = over(parse(getComputedStyle(el).color), bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    found.push({ text: text.slice(0, 40), cls: String(el.className), ratio: (hi + 0.05) / (lo + 0.05) });
  }
  return found;
}"""


def low_contrast(element: Any, minimum: float = 4.5) -> list[dict[str, Any]]:
    """Text in ``element`` whose contrast with its background is below ``minimum``."""
    measured: list[dict[str, Any]] = element.evaluate(CONTRASTS)
    assert measured, "no text measured"
    return [m for m in measured if m["ratio"] < minimum]


def set_theme(page: Any, theme: str) -> None:
    """Settings > Theme > ``theme`` (``JupyterLab Dark``, ``JupyterLab Light``) in Lab."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").first.click()
    page.locator("li.lm-Menu-item", has_text="Theme").first.hover()
    page.get_by_role("menuitem", name=theme, exact=True).click()
    light = "false" if "Dark" in theme else "true"
    page.locator(f"body[data-jp-theme-light='{light}'][data-jp-theme-name='{theme}']").wait_for(
        state="attached"
    )


class Clock:
    """Prints how long each phase of a test took (shown with ``-s`` or on a failure)."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, phase: str) -> None:
        print(f"{time.monotonic() - self.start:6.1f}s  {phase}")


@contextlib.contextmanager
def diagnosed(page: Any, server: Server, name: str) -> Iterator[None]:
    """On a failure: a screenshot ``NAME-failure.png`` and the server's log in the report."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            print(f"screenshot: {shot(page, f'{name}-failure.png')}")
        print(f"--- {server.name} log (end) ---\n{server.log_tail()}")
        raise
