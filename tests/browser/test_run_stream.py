"""A long streamed answer in JupyterLab: the view is sent deltas and shows all of it.

While it streams the header counts tokens (an estimate: usage comes per step);
once done, the answer scrolls inside a capped box (the header, summary and cards
stay in sight) and is set apart as the final answer.

The run widget sends appended text, not the whole text, each update; the
widget's front-end model composes the steps from them, and a second view of the
same widget, displayed while the answer streams, draws what the model holds at
once and then follows it. At the end both views show the whole answer, exactly. Screenshot ``jupyterlab-stream.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .harness import Server
from .pages import LAB, cells, diagnosed, run_cell, shot

WORDS = 4000
SETUP = f"""\
%load_ext nbdurable
import nbdurable as nd
from nbdurable.notebook import session
from nbdurable.notebook.widgets import RunWidget

words = "".join(f"w{{i}} " for i in range({WORDS}))
talker = nd.Agent(
    "talker", nd.ScriptedModel([words], stream_delay=0.003), [], version="1", stream=True
)"""
START = """\
run = session().submit(talker, "Talk.", run_id="s1")
widget = RunWidget(session().runtime, run.run_id)
widget"""
AGAIN = "widget  # a second view of the same widget, while the answer streams"
EXPECTED = " ".join(f"w{i}" for i in range(WORDS))


def notebook(*sources: str) -> Any:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    return nb


def shown_text(view: Any) -> str:
    return " ".join(t.strip() for t in view.locator(".nbd-step .nbd-text").all_inner_texts())


def test_a_long_streamed_answer_shows_whole_in_two_views_of_one_widget(
    jupyter: Server, page: Any, folder: Path
) -> None:
    import nbformat

    nbformat.write(notebook(SETUP, START, AGAIN), folder / "stream.ipynb")
    path = f"{folder.name}/stream.ipynb"
    with diagnosed(page, jupyter, "jupyterlab-stream"):
        LAB.open(page, jupyter, path)
        run_cell(page, 0)
        first = run_cell(page, 1).locator(".nbd-run")
        first.locator(".nbd-text.nbd-streaming").wait_for(timeout=60_000)  # text streams in
        live = first.locator(".nbd-live-tokens")
        live.filter(has_text="streaming · ~").wait_for()  # a live count, while usage is unknown
        second = run_cell(page, 2).locator(".nbd-run")
        second.locator(".nbd-text").first.wait_for(timeout=60_000)  # the model's steps, at once
        assert second.locator(".nbd-badge").inner_text() == "running"  # rendered mid-stream
        assert EXPECTED.startswith(shown_text(second))
        for view in (first, second):
            view.locator(".nbd-badge.nbd-status-completed").wait_for(timeout=120_000)
        page.wait_for_function(
            "() => !document.querySelector('.nbd-run .nbd-text.nbd-streaming')", timeout=30_000
        )
        assert shown_text(first) == EXPECTED
        assert shown_text(second) == EXPECTED
        assert first.get_attribute("data-kernel") == "live"
        assert live.inner_text() == ""  # the step ended: its usage is known
        # the long answer scrolls inside a capped box, set apart as the answer
        box = first.locator(".nbd-steps")
        height, scrolled = box.evaluate("(b) => [b.clientHeight, b.scrollHeight]")
        assert height <= 600 < scrolled, (height, scrolled)
        assert first.locator(".nbd-step.nbd-final").count() == 1
        assert cells(page).count() == 3
        second.scroll_into_view_if_needed()
        shot(page, "jupyterlab-stream.png")
