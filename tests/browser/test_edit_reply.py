"""Edit and Reply on the approval card, clicked in JupyterLab.

- Edit: the card of a tool that allows editing has **Edit…**; its form is built
  from the tool's schema and prefilled with the model's arguments; a fraction typed
  for an integer is said under the field and nothing is sent; a valid edit approves
  the call, which runs with the edited arguments (the model repeats the tool's
  result), and the card folds to "edited and approved" with the call that ran.
  Screenshots ``edit-form.png``, ``edit-approved.png``.
- Reply: **Reply…**, a text, **Send reply**: the tool does not run, the model reads
  the text as the call's result. Screenshot ``reply-sent.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .harness import Server
from .pages import LAB, Clock, diagnosed, enabled, low_contrast, run_cell, shot
from .test_stale_widgets import notebook

SETUP = '''\
%load_ext nbdurable
import nbdurable as nd

@nd.tool(needs_approval=True, allow_edit=True)
def archive_table(name: str, keep_days: int = 30) -> str:
    """Archive a warehouse table, keeping keep_days days of it."""
    return f"archived {name}, kept {keep_days} days"

def said(request):
    return f"Tool said: {request.messages[-1].tool_results[0].result}"

model = nd.ScriptedModel([nd.Turn.call("archive_table", name="stg_2023"), said])
archivist = nd.Agent("archivist", model, [archive_table], version="1")'''

REPLY = "stg_2023 is archived already: nothing to do"


def _waiting_card(page: Any, jupyter: Server, folder: Path, name: str, run_id: str) -> Any:
    """The notebook ``name`` opened, its run waiting for approval: the run view."""
    import nbformat

    agent = f"%%agent archivist --run-id {run_id}\nArchive the stale staging table."
    nbformat.write(notebook(SETUP, agent), folder / name)
    LAB.open(page, jupyter, f"{folder.name}/{name}")
    run_cell(page, 0)
    view = run_cell(page, 1).locator(".nbd-run")
    enabled(view.locator(".nbd-card button.nbd-approve"), timeout=60)
    return view


def test_edit_the_arguments_then_approve(jupyter: Server, page: Any, folder: Path) -> None:
    clock = Clock()
    with diagnosed(page, jupyter, "edit"):
        view = _waiting_card(page, jupyter, folder, "edit.ipynb", "e1")
        card = view.locator(".nbd-card").first
        # the two common answers first, then Edit… and Reply…
        labels = card.locator(".nbd-card-actions button").all_inner_texts()
        assert labels[:4] == ["Approve", "Deny", "Edit…", "Reply…"], labels
        assert low_contrast(card) == []
        shot(view, "edit-card.png")
        card.locator("button.nbd-edit-open").click()
        form = card.locator(".nbd-edit")
        name = form.locator("input[name='name']")
        keep = form.locator("input[name='keep_days']")
        assert name.input_value() == "stg_2023"  # the model's argument
        assert keep.input_value() == ""  # not given by the model: its default applies
        assert keep.get_attribute("type") == "number"
        clock("the Edit form, from the tool's schema")

        keep.fill("1.5")
        form.locator("button.nbd-edit-send").click()
        error = form.locator("[data-field='keep_days'] .nbd-field-error")
        assert error.inner_text() == "not an integer: 1.5"
        assert view.locator(".nbd-badge").inner_text() == "waiting_approval"  # nothing sent
        name.fill("stg_2023_old")
        keep.fill("7")
        assert error.is_hidden()  # a field being fixed no longer says it is wrong
        assert low_contrast(card) == []
        shot(page, "edit-form.png")
        form.locator("button.nbd-edit-send").click()

        view.locator(".nbd-badge.nbd-status-completed").wait_for(timeout=60_000)
        folded = view.locator(".nbd-card-collapsed.nbd-card-approved")
        assert folded.locator(".nbd-card-outcome").inner_text().startswith("edited and approved")
        ran = folded.locator(".nbd-card-edited").inner_text()
        assert ran == 'ran as archive_table(name="stg_2023_old", keep_days=7)', ran
        texts = view.locator(".nbd-step .nbd-text").all_inner_texts()
        assert texts[-1].strip() == "Tool said: archived stg_2023_old, kept 7 days", texts
        clock("edited, approved, the edited call ran")
        shot(page, "edit-approved.png")


def test_reply_in_place_of_the_tool(jupyter: Server, page: Any, folder: Path) -> None:
    clock = Clock()
    with diagnosed(page, jupyter, "reply"):
        view = _waiting_card(page, jupyter, folder, "reply.ipynb", "r1")
        card = view.locator(".nbd-card").first
        card.locator("button.nbd-reply-open").click()
        send = card.locator("button.nbd-reply-send")
        assert send.is_disabled()  # nothing typed yet
        card.locator("textarea.nbd-reply-text").fill(REPLY)
        send.click()
        view.locator(".nbd-badge.nbd-status-completed").wait_for(timeout=60_000)
        folded = view.locator(".nbd-card-collapsed.nbd-card-replied")
        outcome = folded.locator(".nbd-card-outcome").inner_text()
        assert outcome.startswith("replied") and outcome.endswith(REPLY), outcome
        texts = view.locator(".nbd-step .nbd-text").all_inner_texts()
        assert texts[-1].strip() == f"Tool said: {REPLY}", texts
        clock("replied, the model read the reply")
        shot(page, "reply-sent.png")


def test_the_inbox_edits_then_replies(jupyter: Server, page: Any, folder: Path) -> None:
    """The dashboard's inbox: Edit… opens the same form under the line; Reply… the box."""
    import nbformat

    clock = Clock()
    agents = "\n".join(
        f"%%agent archivist --run-id {run_id}\nArchive the stale staging table." for run_id in "ab"
    ).split("\n%%agent")
    cells = [SETUP, agents[0], "%%agent" + agents[1], "%durable dashboard"]
    nbformat.write(notebook(*cells), folder / "inbox.ipynb")
    with diagnosed(page, jupyter, "inbox"):
        LAB.open(page, jupyter, f"{folder.name}/inbox.ipynb")
        run_cell(page, 0)
        for index in (1, 2):  # both wait before the dashboard reads the store
            card = run_cell(page, index).locator(".nbd-run .nbd-card")
            enabled(card.locator("button.nbd-approve"), timeout=60)
        dash = run_cell(page, 3).locator(".nbd-dash")
        dash.scroll_into_view_if_needed()
        edited = dash.locator(".nbd-dash-approval[data-run-id='a']")
        enabled(edited.locator("button.nbd-edit-open"), timeout=60)
        edited.locator("button.nbd-edit-open").click()
        keep = edited.locator(".nbd-edit input[name='keep_days']")
        keep.fill("3")
        assert edited.locator(".nbd-edit input[name='name']").input_value() == "stg_2023"
        assert low_contrast(dash) == []
        shot(dash, "inbox-edit.png")
        edited.locator("button.nbd-edit-send").click()
        edited.locator(".nbd-dash-outcome", has_text="edited arguments").wait_for(timeout=60_000)
        clock("edited and approved from the inbox")

        replied = dash.locator(".nbd-dash-approval[data-run-id='b']")
        replied.locator("button.nbd-reply-open").click()
        page.keyboard.type("leave it: finance reads it")  # the box has the focus
        page.keyboard.press("Enter")
        replied.locator(".nbd-dash-outcome", has_text="replied").wait_for(timeout=60_000)
        for run_id in "ab":
            row = dash.locator(f"tr[data-run-id='{run_id}'] .nbd-dash-badge.nbd-s-completed")
            row.wait_for(timeout=60_000)
        clock("replied from the inbox: both runs completed")
        shot(dash, "inbox-answered.png")
