"""Edit and Reply from the approval card and the dashboard's inbox, kernel side (no browser).

A card offers Edit only for a tool that allows it, with the tool's schema; an edit
whose arguments do not fit comes back as the typed error while the request keeps
waiting; a valid one runs the edited call; a reply settles the call with its text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.notebook.widgets import RunsDashboard, RunWidget
from nbdurable.notebook.widgets._verdict_kinds import VerdictKind, verdict_kind

from .widget_fixtures import drop_table, eventually, front_end_sends, runtime_for

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RAN: list[dict[str, Any]] = []


@nd.tool(needs_approval=True, allow_edit=True)
def archive_table(name: str, keep_days: int = 30) -> str:
    """Archive a warehouse table, keeping ``keep_days`` days of it."""
    RAN.append({"name": name, "keep_days": keep_days})
    return f"archived {name}, kept {keep_days} days"


def _said(request: Any) -> str:
    return f"Tool said: {request.messages[-1].tool_results[0].result}"


def archivist() -> nd.Agent:
    """Asks to archive stg_2023, then repeats what the tool (or the human) said."""
    model = nd.ScriptedModel([nd.Turn.call("archive_table", name="stg_2023"), _said])
    return nd.Agent("archivist", model, [archive_table], version="1")


def dropper() -> nd.Agent:
    """Asks to drop stg_2023 (a tool that does not allow editing), then repeats the result."""
    model = nd.ScriptedModel([nd.Turn.call("drop_table", name="stg_2023"), _said])
    return nd.Agent("dropper", model, [drop_table], version="1")


async def _card(widget: RunWidget, state: str = "pending") -> dict[str, Any]:
    await eventually(lambda: [c["state"] for c in widget.approvals] == [state])
    card: dict[str, Any] = widget.approvals[0]
    return card


def _send(widget: RunWidget, card: dict[str, Any], **content: Any) -> None:
    front_end_sends(widget, {"approval_id": card["approval_id"], "token": card["token"], **content})


async def test_the_card_offers_edit_with_the_tools_schema_and_the_models_arguments(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, archivist(), dropper()) as runtime:
        edited = await runtime.submit("archivist", "Tidy up.")
        plain = await runtime.submit("dropper", "Tidy up.")
        await edited.wait("waiting_approval")
        await plain.wait("waiting_approval")
        card = await _card(RunWidget(runtime, edited.run_id))
        assert card["allow_edit"] is True and card["args"] == {"name": "stg_2023"}
        schema = card["parameters"]
        assert schema["properties"]["keep_days"]["type"] == "integer"
        assert schema["required"] == ["name"]
        # a tool that does not allow editing: the view shows no Edit button
        other = await _card(RunWidget(runtime, plain.run_id))
        assert other["allow_edit"] is False and other["parameters"] is None


async def test_an_edit_from_the_card_runs_the_edited_call(tmp_path: Path) -> None:
    RAN.clear()
    async with runtime_for(tmp_path, archivist()) as runtime:
        run = await runtime.submit("archivist", "Tidy up.")
        await run.wait("waiting_approval")
        widget = RunWidget(runtime, run.run_id)
        card = await _card(widget)
        _send(widget, card, type="edit", arguments={"name": "stg_2023_old", "keep_days": 7})
        await widget.settled()
        result = await run.result()
        assert result.text == "Tool said: archived stg_2023_old, kept 7 days"
        assert RAN == [{"name": "stg_2023_old", "keep_days": 7}]
        card = await _card(widget, "approved")
        assert card["edited_args"] == {"name": "stg_2023_old", "keep_days": 7}
        assert card["args"] == {"name": "stg_2023"}  # the model's call, shown beside it


async def test_an_edit_that_does_not_fit_the_schema_shows_the_typed_error_and_waits(
    tmp_path: Path,
) -> None:
    RAN.clear()
    async with runtime_for(tmp_path, archivist()) as runtime:
        run = await runtime.submit("archivist", "Tidy up.")
        await run.wait("waiting_approval")
        widget = RunWidget(runtime, run.run_id)
        card = await _card(widget)
        _send(widget, card, type="edit", arguments={"name": "stg_2023", "keep_days": "a week"})
        await widget.settled()
        card = await _card(widget, "error")
        # the InvalidEditError's words: what does not fit, and that nothing was recorded
        assert "do not fit tool 'archive_table'" in card["message"]
        assert "keep_days" in card["message"] and "still waits" in card["message"]
        assert run.record().state == "waiting_approval" and run.record().verdicts == {}
        assert [r.approval_id for r in await run.pending_approvals()] == [card["approval_id"]]
        assert RAN == []
        # the card still answers: a fixed edit goes through
        _send(widget, card, type="edit", arguments={"name": "stg_2023", "keep_days": 1})
        await widget.settled()
        assert (await run.result()).text == "Tool said: archived stg_2023, kept 1 days"


async def test_an_edit_of_a_tool_that_does_not_allow_it_is_refused(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, dropper()) as runtime:
        run = await runtime.submit("dropper", "Tidy up.")
        await run.wait("waiting_approval")
        widget = RunWidget(runtime, run.run_id)
        card = await _card(widget)
        _send(widget, card, type="edit", arguments={"name": "orders"})  # a crafted message
        await widget.settled()
        card = await _card(widget, "error")
        assert "does not allow editing" in card["message"]  # EditNotAllowedError's words
        assert run.record().state == "waiting_approval" and run.record().verdicts == {}


async def test_a_reply_from_the_card_settles_the_call_with_its_text(tmp_path: Path) -> None:
    RAN.clear()
    async with runtime_for(tmp_path, archivist()) as runtime:
        run = await runtime.submit("archivist", "Tidy up.")
        await run.wait("waiting_approval")
        widget = RunWidget(runtime, run.run_id)
        card = await _card(widget)
        _send(widget, card, type="reply", text="stg_2023 is archived already; nothing to do")
        await widget.settled()
        result = await run.result()
        assert result.text == "Tool said: stg_2023 is archived already; nothing to do"
        assert RAN == []  # the tool never ran
        card = await _card(widget, "replied")
        assert card["reply"] == "stg_2023 is archived already; nothing to do"


async def test_an_empty_reply_or_a_non_object_edit_is_refused_before_the_runtime(
    tmp_path: Path,
) -> None:
    async with runtime_for(tmp_path, archivist()) as runtime:
        run = await runtime.submit("archivist", "Tidy up.")
        await run.wait("waiting_approval")
        widget = RunWidget(runtime, run.run_id)
        card = await _card(widget)
        _send(widget, card, type="reply", text="   ")
        assert (await _card(widget, "error"))["message"].startswith("error: the reply is empty")
        _send(widget, card, type="edit", arguments=["stg_2023"])
        assert "not a JSON object" in (await _card(widget, "error"))["message"]
        assert run.record().verdicts == {} and run.record().state == "waiting_approval"


def test_verdict_kinds_from_view_messages() -> None:
    assert verdict_kind({"type": "approve"}) == VerdictKind(approve=True)
    assert verdict_kind({"type": "deny", "reason": "no"}) == VerdictKind(False, reason="no")
    assert verdict_kind({"type": "edit", "arguments": {"a": 1}}) == VerdictKind(
        True, arguments={"a": 1}
    )
    assert verdict_kind({"type": "reply", "text": "hi"}) == VerdictKind(False, reply="hi")
    assert isinstance(verdict_kind({"type": "reply", "text": 3}), str)
    assert isinstance(verdict_kind({"type": "edit", "arguments": {1: 2}}), str)


async def test_the_inbox_edits_and_replies_like_the_card(tmp_path: Path) -> None:
    RAN.clear()
    async with runtime_for(tmp_path, archivist()) as runtime:
        edited = await runtime.submit("archivist", "Tidy up.")
        replied = await runtime.submit("archivist", "Tidy up again.")
        await edited.wait("waiting_approval")
        await replied.wait("waiting_approval")
        dashboard = RunsDashboard(runtime, refresh_interval=0.05)
        try:
            await eventually(lambda: len(dashboard.view.approvals) == 2)
            rows = {r["run_id"]: r for r in dashboard.view.approvals}
            row = rows[edited.run_id]
            assert row["allow_edit"] is True and row["args"] == {"name": "stg_2023"}
            assert row["parameters"]["properties"]["name"]["type"] == "string"
            assert "token" not in row  # the view never holds one
            base = {"run_id": edited.run_id, "approval_id": row["approval_id"]}
            front_end_sends(dashboard.view, {**base, "type": "edit", "arguments": {"name": 5}})
            await dashboard.settled()
            mine = [r for r in dashboard.view.approvals if r["run_id"] == edited.run_id]
            assert mine[0]["state"] == "error" and "do not fit" in mine[0]["message"]
            assert edited.record().state == "waiting_approval"
            front_end_sends(
                dashboard.view, {**base, "type": "edit", "arguments": {"name": "stg_old"}}
            )
            other = rows[replied.run_id]
            front_end_sends(
                dashboard.view,
                {
                    "type": "reply",
                    "run_id": replied.run_id,
                    "approval_id": other["approval_id"],
                    "text": "leave it",
                },
            )
            await dashboard.settled()
            assert (await edited.result()).text == "Tool said: archived stg_old, kept 30 days"
            assert (await replied.result()).text == "Tool said: leave it"
            states = {r["run_id"]: r["state"] for r in dashboard.view.approvals}
            assert states == {edited.run_id: "approved", replied.run_id: "replied"}
            assert RAN == [{"name": "stg_old", "keep_days": 30}]
        finally:
            dashboard.close()


async def test_a_card_shows_an_edit_or_a_reply_given_elsewhere(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, archivist()) as runtime:
        edited = await runtime.submit("archivist", "Tidy up.")
        replied = await runtime.submit("archivist", "Tidy up again.")
        await edited.wait("waiting_approval")
        await replied.wait("waiting_approval")
        one, two = RunWidget(runtime, edited.run_id), RunWidget(runtime, replied.run_id)
        await _card(one)
        await _card(two)
        await edited.approve(arguments={"name": "stg_old"}, by="ana", via="magic")
        await replied.respond(None, "not today", by="ana", via="magic")
        await edited.result()
        await replied.result()
        card = await _card(one, "approved")
        assert card["edited_args"] == {"name": "stg_old"} and card["decided_by"].startswith(
            "by ana"
        )
        card = await _card(two, "replied")
        assert card["reply"] == "not today" and card["message"] == "replied in place of the tool"
