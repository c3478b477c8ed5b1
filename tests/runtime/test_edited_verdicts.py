"""Verdicts beyond yes and no: approve with edited arguments, and reply in place of the tool.

An edit runs the call with the human's arguments (validated against the tool's
schema first; a tool must allow edits); the token still binds the model's call;
the record keeps both argument sets, who edited and when; the history shows the
call that ran and the model reads a note that a human edited it. A reply settles
the call with its text as a result (not an error). The cross-process race is in
test_edited_verdict_races.py, the kill -9 in test_edited_verdict_crash.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.inspect._approvals import approval_rows
from nbdurable.models._base import ModelRequest
from nbdurable.runtime import Agent, DurableRuntime
from nbdurable.runtime._checked_verdicts import submit_verdict

SEEN: list[list[nd.Message]] = []


def janitor(ran: list[str], *, allow_edit: bool = True, agent_id: str = "janitor") -> Agent:
    """One gated ``drop_table(name, cascade)`` call, then an answer naming what it read."""

    @nd.tool(needs_approval=True, allow_edit=allow_edit)
    def drop_table(name: str, cascade: bool = False) -> str:
        """Drop a table."""
        ran.append(f"{name}{'+cascade' if cascade else ''}")
        return f"dropped {name}"

    def answer(request: ModelRequest) -> nd.Turn:
        SEEN.append(list(request.messages))
        return nd.Turn(text=f"read: {request.messages[-1].tool_results[0].result}")

    model = nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), answer])
    return Agent(agent_id, model, [drop_table], version="1")


async def parked(rt: DurableRuntime) -> tuple[nd.runtime.Run, nd.ToolApprovalRequest]:
    run = await rt.submit("janitor", "Clean up.")
    await run.wait("waiting_approval")
    [request] = await run.pending_approvals()
    return run, request


async def test_an_edited_call_runs_with_the_edit_and_the_history_shows_both(store: Any) -> None:
    ran: list[str] = []
    SEEN.clear()
    async with await DurableRuntime.open(store=store, agents=[janitor(ran)]) as rt:
        run, request = await parked(rt)
        assert request.allow_edit is True
        assert request.parameters is not None
        assert set(request.parameters["properties"]) == {"name", "cascade"}
        await run.approve(request.approval_id, arguments={"name": "stg_old"}, by="ana")
        result = await run.result()
        assert result.text == "read: dropped stg_old"
        record = run.record()
    assert ran == ["stg_old"]
    # the record: both argument sets, who edited and when
    decision = record.decided[request.approval_id]
    assert decision.kind == "edited" and decision.approved
    assert decision.arguments == {"name": "stg_old"}
    assert decision.original_arguments == {"name": "stg"}
    assert decision.source is not None and decision.source.by == "ana" and decision.at > 0
    # the history: the call that ran, the approval part with both
    messages = store.load(run.run_id).messages
    [assistant] = [m for m in messages if m.role == "assistant" and m.tool_calls]
    assert assistant.tool_calls[0].args == {"name": "stg_old"}
    [part] = [p for p in assistant.content if isinstance(p, nd.messages.ApprovalRequestPart)]
    assert part.request.input == {"name": "stg"}
    assert part.verdict is not None and part.verdict.arguments == {"name": "stg_old"}
    # the model: the edited call, and a note that a human edited it
    [view] = SEEN
    [seen] = [m for m in view if m.role == "assistant"]
    assert seen.tool_calls[0].args == {"name": "stg_old"}
    assert "edited the arguments" in seen.text and '{"name": "stg"}' in seen.text
    assert not any(isinstance(p, nd.messages.ApprovalRequestPart) for p in seen.content)


async def test_a_reply_settles_the_call_with_its_text_and_the_tool_never_runs(store: Any) -> None:
    ran: list[str] = []
    SEEN.clear()
    async with await DurableRuntime.open(store=store, agents=[janitor(ran)]) as rt:
        run, request = await parked(rt)
        await run.respond(request.approval_id, "use the staging table instead", by="lee")
        result = await run.result()
        record = run.record()
    assert ran == []
    assert result.text == "read: use the staging table instead"
    [tool_msg] = [m for m in store.load(run.run_id).messages if m.role == "tool"]
    assert tool_msg.tool_results[0].result == "use the staging table instead"
    assert tool_msg.tool_results[0].is_error is False
    decision = record.decided[request.approval_id]
    assert (decision.kind, decision.reply) == ("replied", "use the staging table instead")
    assert decision.source is not None and decision.source.by == "lee"
    [seen] = [m for m in SEEN[0] if m.role == "assistant"]
    assert "answered the drop_table call" in seen.text


async def test_an_edit_of_a_tool_that_allows_none_is_refused_and_the_request_waits() -> None:
    ran: list[str] = []
    async with await DurableRuntime.open(
        store=nd.open_store("memory://"), agents=[janitor(ran, allow_edit=False)]
    ) as rt:
        run, request = await parked(rt)
        assert request.allow_edit is False and request.parameters is None
        with pytest.raises(nd.EditNotAllowedError) as refused:
            await run.approve(request.approval_id, arguments={"name": "other"})
        assert isinstance(refused.value, nd.NbdurableError)
        assert refused.value.tool_name == "drop_table"
        assert run.record().state == "waiting_approval"
        await run.approve(request.approval_id)  # still decidable
        await run.result()
    assert ran == ["stg"]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"name": 3}, "name"),
        ({"cascade": True}, "name"),
        ({"name": "x", "drop_all": True}, "drop_all"),
        (["name"], "JSON object"),
    ],
)
async def test_edited_arguments_that_do_not_fit_are_refused_and_the_request_waits(
    arguments: Any, problem: str
) -> None:
    ran: list[str] = []
    async with await DurableRuntime.open(
        store=nd.open_store("memory://"), agents=[janitor(ran)]
    ) as rt:
        run, request = await parked(rt)
        with pytest.raises(nd.InvalidEditError) as refused:
            await run.approve(request.approval_id, arguments=arguments)
        assert problem in str(refused.value)
        assert run.record().state == "waiting_approval"
        assert request.approval_id not in run.record().decided
        await run.approve(request.approval_id, arguments={"name": "ok", "cascade": True})
        await run.result()
    assert ran == ["ok+cascade"]


async def test_the_token_binds_the_model_call_and_events_and_explain_show_both() -> None:
    ran: list[str] = []
    store = nd.open_store("memory://")
    async with await DurableRuntime.open(store=store, agents=[janitor(ran)]) as rt:
        run, request = await parked(rt)
        assert request.token is not None
        payload = json.loads(base64.urlsafe_b64decode(request.token.split(".")[1] + "=="))
        assert payload["input"] == {"name": "stg"}
        assert "allow_edit" not in payload and "parameters" not in payload
        outcome = await submit_verdict(
            rt,
            run.run_id,
            request.approval_id,
            approve=True,
            token=request.token,
            arguments={"name": "stg_b"},
            source=nd.messages.VerdictSource(by="ana", via="widget"),
        )
        assert outcome.state == "approved" and "edited" in outcome.message
        await run.result()
    assert ran == ["stg_b"]
    [resolved] = [e.payload for e in store.read_events(run.run_id) if e.type == "approval_resolved"]
    assert resolved["arguments"] == {"name": "stg_b"}
    assert resolved["original_arguments"] == {"name": "stg"}
    explained = str(nd.inspect.explain(store, run.run_id))
    assert "approved with edited arguments by ana (claimed)" in explained
    assert 'ran with (name="stg_b") instead of (name="stg")' in explained
    [row] = approval_rows(store, run_id=run.run_id)
    assert (row["status"], row["arguments"]) == ("approved", {"name": "stg"})
    assert row["edited_arguments"] == {"name": "stg_b"} and row["allow_edit"] is True


async def test_a_refused_edit_through_the_card_path_is_an_error_outcome_and_records_nothing() -> (
    None
):
    async with await DurableRuntime.open(
        store=nd.open_store("memory://"), agents=[janitor([], allow_edit=False)]
    ) as rt:
        run, request = await parked(rt)
        outcome = await submit_verdict(
            rt, run.run_id, request.approval_id, approve=True, token=request.token,
            arguments={"name": "x"},
        )  # fmt: skip
        assert outcome.state == "error" and not outcome.recorded
        assert isinstance(outcome.edit_refusal, nd.EditNotAllowedError)
        assert run.record().decided == {}
        replied = await submit_verdict(
            rt, run.run_id, request.approval_id, approve=False, reply="r"
        )
        assert replied.state == "replied" and replied.recorded
        await run.result()


async def test_a_reply_and_an_edit_are_verdicts_one_wins_and_a_repeat_is_no_conflict() -> None:
    ran: list[str] = []
    async with await DurableRuntime.open(
        store=nd.open_store("memory://"), agents=[janitor(ran)]
    ) as rt:
        run, request = await parked(rt)
        await run.respond(request.approval_id, "no: keep it")
        await run.respond(request.approval_id, "no: keep it")  # the winner's repeat
        with pytest.raises(nd.ApprovalNotPendingError) as lost:
            await run.approve(request.approval_id, arguments={"name": "x"})
        assert lost.value.verdict == "replied"
        with pytest.raises(nd.ApprovalNotPendingError):
            await run.respond(request.approval_id, "another answer")
        outcome = await submit_verdict(rt, run.run_id, request.approval_id, approve=False)
        assert (outcome.state, outcome.winner) == ("stale", "replied")
        await run.result()
    assert ran == []


async def test_a_blank_reply_is_refused() -> None:
    async with await DurableRuntime.open(
        store=nd.open_store("memory://"), agents=[janitor([])]
    ) as rt:
        run, request = await parked(rt)
        with pytest.raises(nd.ConfigurationError):
            await run.respond(request.approval_id, "  ")
        await run.deny(request.approval_id)
        await run.result()


def test_a_verdict_is_one_kind() -> None:
    with pytest.raises(ValueError, match="approved=True"):
        nd.ToolApprovalResponse(approval_id="a", approved=False, arguments={"x": 1})
    with pytest.raises(ValueError, match="approved=False"):
        nd.ToolApprovalResponse(approval_id="a", approved=True, reply="hi")
    plain = nd.ToolApprovalResponse(approval_id="a", approved=True)
    assert plain.model_dump() == {
        "approval_id": "a",
        "approved": True,
        "reason": None,
        "token": None,
    }
    assert plain.kind == "approved"
    assert nd.ToolApprovalResponse(approval_id="a", approved=False, reply="r").kind == "replied"


async def test_a_sub_agents_call_is_edited_and_a_reply_reaches_it() -> None:
    ran: list[str] = []

    @nd.tool(needs_approval=True, allow_edit=True)
    def run_shell(cmd: str) -> str:
        """Run a shell command."""
        ran.append(cmd)
        return f"ran {cmd}"

    def coder_done(request: ModelRequest) -> str:
        return f"coder read: {request.messages[-1].tool_results[0].result}"

    coder = nd.agent_tool(
        "coder",
        model=nd.ScriptedModel([nd.Turn.call("run_shell", cmd="pytest"), coder_done]),
        tools=[run_shell],
    )
    parent = nd.ScriptedModel([nd.Turn.call("coder", prompt="test"), _echo_result])
    lead = Agent("lead", parent, [coder], version="1", tool_recovery={"coder": "safe"})
    async with await DurableRuntime.open(store=nd.open_store("memory://"), agents=[lead]) as rt:
        edited = await rt.submit("lead", "Have the coder test it.")
        replied = await rt.submit("lead", "Have the coder test it again.")
        for run in (edited, replied):
            await run.wait("waiting_approval")
        [request] = await edited.pending_approvals()
        assert request.agent_path == ("coder",) and request.allow_edit
        with pytest.raises(nd.InvalidEditError):  # held to the sub-agent's tool
            await edited.approve(request.approval_id, arguments={"command": "x"})
        await edited.approve(request.approval_id, arguments={"cmd": "pytest -x"})
        await replied.respond(None, "tests pass already")
        assert (await edited.result()).text == "coder read: ran pytest -x"
        assert (await replied.result()).text == "coder read: tests pass already"
    assert ran == ["pytest -x"]


def _echo_result(request: ModelRequest) -> str:
    return str(request.messages[-1].tool_results[0].result)


async def test_the_submitter_may_reply_but_not_edit_when_they_may_not_approve() -> None:
    ran: list[str] = []
    base = janitor(ran)
    agent = Agent("janitor", base.model, base.tools, version="1", submitter_may_approve=False)
    async with await DurableRuntime.open(store=nd.open_store("memory://"), agents=[agent]) as rt:
        run = await rt.submit("janitor", "Clean up.", submitted_by="ana")
        await run.wait("waiting_approval")
        with pytest.raises(nd.ApproverNotAllowedError):
            await run.approve(arguments={"name": "stg_x"}, by="ana")
        await run.respond(None, "leave it", by="ana")
        assert (await run.result()).text == "read: leave it"
    assert ran == []
