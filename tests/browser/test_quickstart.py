"""The quickstart as a first-time user meets it, in JupyterLab and in Notebook 7.

In a copy of ``notebooks/``, the test opens ``01-quickstart.ipynb``, runs the cells
down to ``%%agent``, sees the run widget's text stream in and the approval card,
clicks **Approve**, sees the run complete and the card fold to one line, runs the
rest of the notebook; then does what "What to try next" says: runs the ``%%agent``
cell again (a new run starts) and clicks **Deny** with a reason. Last, the
history browser of the run (its button label must be whole).

Screenshots (``test-artifacts/``): ``FRONTEND-approval.png``,
``FRONTEND-completed.png``, ``FRONTEND-denied.png``, ``FRONTEND-history.png``, and
``run-widget-approval.png`` (the cell and its widget in JupyterLab: the README's
picture, ``docs/img/``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from .harness import Server
from .pages import (
    CLOCK_TIME,
    LAB,
    NOTEBOOK7,
    Clock,
    Frontend,
    add_cell_at_end,
    cell_starting,
    cells,
    diagnosed,
    enabled,
    errors,
    low_contrast,
    matches,
    menu,
    run_cell,
    select,
    served_quickstart,
    shot,
    stdout,
)

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

ALL_RAN = """() => {
  const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
  return prompts.length > 0 && prompts.every((p) => /^\\[\\d+\\]:$/.test(p.textContent.trim()));
}"""

REASON = "keep it: finance still reads it"


@pytest.mark.usefixtures("voila_server")  # started now, warm by the time its test runs
@pytest.mark.parametrize("frontend", [LAB, NOTEBOOK7], ids=lambda f: f.name)
def test_quickstart_streams_approves_then_denies(
    frontend: Frontend, jupyter: Server, page: Any, folder: Path
) -> None:
    """Not Run All: the cell after ``%%agent`` approves from code only when the run is
    unattended, so the test runs the cells down to ``%%agent``, clicks, then runs the rest.
    """
    clock = Clock()
    # Words every 40 ms, not the notebook's 120 (~11 s less): still a dozen partial
    # texts on screen before the card; tests/notebook/ checks the notebook's own pace.
    served_quickstart(folder, stream_delay=0.04)
    path = f"{folder.name}/01-quickstart.ipynb"
    name = frontend.name
    with diagnosed(page, jupyter, name):
        frontend.open(page, jupyter, path)
        clock("notebook open, kernel idle")
        page.evaluate(RECORD_TEXT)

        agent_at = cell_starting(page, "%%agent")
        agent_cell = select(page, agent_at)
        menu(page, "Run", "notebook:run-all-above")
        menu(page, "Run", "notebook:run-cell")

        # the run widget appears, its text streams in, then the approval card
        widget = agent_cell.locator(".nbd-run")
        card = widget.locator(".nbd-card").first
        approve = card.locator("button.nbd-approve")
        enabled(approve, timeout=60)
        clock("text streamed, approval card shown")
        assert widget.locator(".nbd-badge").inner_text() == "waiting_approval"
        assert "(" in card.locator(".nbd-card-call").inner_text()  # tool(args...)
        assert widget.locator(".nbd-summary").inner_text() == "waiting for approval: drop_table"
        progress = widget.locator(".nbd-progress").inner_text()
        assert matches(r"\d+ steps? \(budget \d+\) · [\d,]+ tokens.*", progress), progress
        assert "(this agent)" not in widget.inner_text()
        assert widget.get_attribute("data-kernel") == "live"
        assert not widget.locator(".nbd-live").is_visible()  # live: no connection note
        samples = page.evaluate("() => window.__nbdTexts")
        lengths = [s["length"] for s in samples]
        assert len(set(lengths)) >= 2 and lengths == sorted(lengths), (
            f"the text did not grow on screen (lengths seen: {lengths})"
        )
        assert any(s["streaming"] for s in samples), (
            f"no partial text was ever shown, only whole steps: {samples}"
        )
        assert low_contrast(widget) == []

        agent_cell.scroll_into_view_if_needed()
        shot(page, f"{name}-approval.png")
        if frontend is LAB:
            shot(agent_cell, "run-widget-approval.png")

        # the standing grant is secondary and asks first: nothing is sent before the confirm
        card.locator("button.nbd-grant").click()
        confirm = card.locator("button.nbd-grant-send")
        assert confirm.inner_text() == "Approve every drop_table call for 30 min"
        assert card.locator("button.nbd-approve:not(.nbd-grant-send)").count() == 0
        card.locator("button.nbd-cancel").click()
        enabled(approve)

        approve.click()

        # the kernel verifies the signed token and resumes: the run completes
        widget.locator(".nbd-badge.nbd-status-completed").wait_for()
        answered = widget.locator(".nbd-card.nbd-card-collapsed.nbd-card-approved")
        answered.wait_for()
        outcome = answered.locator(".nbd-card-outcome").inner_text()
        assert matches(f"approved at {CLOCK_TIME}", outcome), outcome
        assert widget.locator(".nbd-card-title").count() == 0  # no "Approval needed" left
        assert widget.locator(".nbd-summary").text_content() == "completed"
        texts = widget.locator(".nbd-step .nbd-text").all_inner_texts()
        final = texts[-1].strip()
        assert final and len(texts) >= 2, texts
        clock("approved in the browser, run completed")
        shot(page, f"{name}-completed.png")

        # the rest of the notebook: nothing left to approve, the run's text printed
        select(page, agent_at + 1)
        menu(page, "Run", "notebook:run-all-below")
        page.wait_for_function(ALL_RAN, timeout=60_000)
        frontend.wait_idle(page, jupyter, path)
        clock("the rest of the notebook ran")
        assert errors(page) == []
        # an output is drawn after its cell's prompt number: wait for it to be drawn
        deadline = time.monotonic() + 30
        while not any(final in text for text in stdout(page)):
            assert time.monotonic() < deadline, (final, stdout(page))
            page.wait_for_timeout(200)

        # "What to try next": the %%agent cell again starts a new run; Deny with a reason
        run_cell(page, agent_at)
        widget = cells(page).nth(agent_at).locator(".nbd-run")
        enabled(widget.locator("button.nbd-approve"), timeout=60)
        assert widget.locator(".nbd-reason").count() == 0  # Deny asks for its reason
        widget.locator("button.nbd-deny").click()
        widget.locator(".nbd-reason").fill(REASON)
        widget.locator("button.nbd-deny-send").click()
        widget.locator(".nbd-badge.nbd-status-completed").wait_for()
        denied = widget.locator(".nbd-card.nbd-card-collapsed.nbd-card-denied")
        outcome = denied.locator(".nbd-card-outcome").inner_text()
        assert matches(f"denied at {CLOCK_TIME}: {REASON}", outcome), outcome
        drop = widget.locator(".nbd-tool", has_text="drop_table")
        assert drop.locator(".nbd-tool-state").inner_text() == "denied"  # not a red "error"
        assert REASON in (drop.locator(".nbd-denied-text").text_content() or "")
        said = widget.locator(".nbd-step .nbd-text").all_inner_texts()[-1]
        assert "kept stg_2023" in said, said  # the model read the denial
        clock("denied in the browser, run completed")
        shot(page, f"{name}-denied.png")

        # the history browser of the run: its button label is whole
        browse = add_cell_at_end(page, "%durable history {run.run_id} --browse")
        button = browse.locator("button.jupyter-button", has_text="Rewind from here")
        button.wait_for()
        width = button.evaluate("(b) => [b.scrollWidth, b.clientWidth]")
        assert width[0] <= width[1], f"the label does not fit its button: {width}"
        assert button.inner_text().strip() == "Rewind from here"
        # a table a person reads: one header row, no column with nothing to say, and
        # the rewind beside the slider it acts on (not below the messages)
        table = browse.locator("table.nbd-messages")
        table.wait_for()
        assert table.locator("thead tr").count() == 1
        heads = table.locator("thead th").all_inner_texts()
        assert heads[0] == "#" and {"role", "text"} <= set(heads), heads
        assert "images" not in heads, heads  # no message has one: no column for them
        slider = browse.locator(".widget-slider, .jupyter-widget-slider").first
        gap = button.bounding_box()["y"] - slider.bounding_box()["y"]
        assert abs(gap) < 40, f"the rewind button is {gap} px away from the slider"
        frontend.wait_idle(page, jupyter, path)
        assert errors(page) == []
        browse.scroll_into_view_if_needed()
        shot(page, f"{name}-history.png")
        clock("history browser shown")

        # rewind: the fork's own history says which run and step it came from
        button.click()
        forked = browse.locator(".widget-html", has_text="as run-").first
        forked.wait_for(timeout=60_000)
        said = re.search(r"forked (\S+) at step (\d+) as (\S+)", forked.inner_text())
        assert said is not None, forked.inner_text()
        source, step, fork_id = said.groups()
        fork = add_cell_at_end(page, f"%durable history {fork_id} --browse")
        fork.locator("button.jupyter-button", has_text="Rewind from here").wait_for()
        heading = fork.locator(".widget-html", has_text="checkpoint(s)").first.inner_text()
        assert f"forked from {source} at step {step}" in heading, heading
        clock("rewound; the fork's history names where it came from")
