"""rewind (forks that share history and never touch the original) and diff."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

import nbdurable as nd
from nbdurable import inspect as ins

from .conftest import TOOLS, make_run, script

SIGNER = nd.ApprovalSigner("test-secret")


def snapshot(store: Any, run_id: str) -> list[Any]:
    return [store.load(run_id, step_index=i.step_index) for i in store.history(run_id)]


async def test_rewind_forks_without_touching_the_original(any_store: Any) -> None:
    await make_run(any_store, "orig")
    before = snapshot(any_store, "orig")
    fork = ins.rewind(any_store, "orig", 1, new_run_id="fork")
    assert snapshot(any_store, "orig") == before
    source = any_store.load("orig", step_index=1)
    assert fork.run_id == "fork" and fork.step_index == 1
    assert fork.messages == source.messages
    assert fork.usage == source.usage  # cumulative usage as of that step
    assert fork.status == "running"
    assert fork.forked_from == nd.ForkPoint(run_id="orig", step_index=1)
    assert any_store.load("fork") == fork
    runs = ins.runs(any_store)
    assert runs.loc["fork", "parent_run"] == "orig"
    assert runs.loc["fork", "fork_step"] == 1


async def test_a_fork_resumes_like_any_run_and_keeps_its_lineage(any_store: Any) -> None:
    await make_run(any_store, "orig")
    ins.rewind(any_store, "orig", 1, new_run_id="fork")
    model = nd.ScriptedModel(script(), price_per_million=(3.0, 15.0))
    result = await nd.resume_from_checkpoint(any_store, "fork", model=model, tools=TOOLS)
    assert result.status == "suspended"  # it reaches the gated drop again, at step 2
    assert result.step_index == 2
    latest = any_store.load("fork")
    assert latest.forked_from == nd.ForkPoint(run_id="orig", step_index=1)
    frame = ins.history(any_store, "fork")
    assert list(frame.index) == [1, 2]
    assert frame["total_tokens"].iloc[-1] > any_store.load("orig", step_index=1).usage.total_tokens
    assert ins.runs(any_store).loc["fork", "parent_run"] == "orig"


async def test_rewind_to_step_zero_and_to_the_last_step(any_store: Any) -> None:
    await make_run(any_store, "orig")
    first = ins.rewind(any_store, "orig", 0, new_run_id="f0")
    assert first.messages == any_store.load("orig", step_index=0).messages
    last = ins.rewind(any_store, "orig", 3, new_run_id="f3")
    assert last.status == "completed" and last.finish_reason == "stop"
    result = await nd.resume_from_checkpoint(
        any_store, "f3", model=nd.ScriptedModel([]), tools=TOOLS
    )
    assert result.status == "completed" and result.text == "Done: dropped stg_2023."


async def test_an_edit_replaces_the_last_message_and_can_change_its_type(any_store: Any) -> None:
    await make_run(any_store, "orig")
    # Step 1 ends with a tool result; replace it with a user message instead.
    fork = ins.rewind(
        any_store, "orig", 1, new_run_id="ed", edit=nd.user("Only older than 90 days.")
    )
    source = any_store.load("orig", step_index=1)
    assert fork.messages[:-1] == source.messages[:-1]
    assert fork.messages[-1] == nd.user("Only older than 90 days.")
    assert source.messages[-1].role == "tool"
    assert fork.status == "running" and fork.pending_approvals == ()
    assert fork.forked_from == nd.ForkPoint(run_id="orig", step_index=1, edited=True)
    # A string is a user message; an assistant text makes the fork completed.
    text = ins.rewind(any_store, "orig", 2, new_run_id="txt", edit="Stop here.")
    assert text.messages[-1] == nd.user("Stop here.")
    done = ins.rewind(any_store, "orig", 2, new_run_id="done", edit=nd.assistant("Nothing to do."))
    assert done.status == "completed"
    diff = ins.diff(any_store, "orig", 1, "ed")
    edited = [c for c in diff.changes if c.kind == "edited"]
    assert len(edited) == 1 and edited[0].role == "user"
    assert "[tool_result]" in edited[0].before and "90 days" in edited[0].after


async def test_an_edited_tool_result_steers_the_fork(any_store: Any) -> None:
    await make_run(any_store, "orig")
    source = any_store.load("orig", step_index=1)
    call = source.messages[-2].tool_calls[0]
    edit = nd.tool_message(
        [nd.ToolResultPart(tool_call_id=call.tool_call_id, tool_name="lookup", result={"rows": 0})]
    )
    fork = ins.rewind(any_store, "orig", 1, new_run_id="tr", edit=edit)
    seen: list[Any] = []

    def turn(request: Any) -> str:
        seen.append(request.messages[-1])
        return "The table is empty; nothing to drop."

    result = await nd.resume_from_checkpoint(
        any_store, "tr", model=nd.ScriptedModel([turn], mode="sequential"), tools=TOOLS
    )
    assert seen == [fork.messages[-1]]
    assert result.status == "completed"


async def test_forks_of_forks(any_store: Any) -> None:
    await make_run(any_store, "orig")
    ins.rewind(any_store, "orig", 2, new_run_id="f1", edit="Check again first.")
    model = nd.ScriptedModel([nd.Turn.call("lookup", table="x"), "fine"], mode="sequential")
    await nd.resume_from_checkpoint(any_store, "f1", model=model, tools=TOOLS)
    grand = ins.rewind(any_store, "f1", 3, new_run_id="f2")
    assert grand.forked_from == nd.ForkPoint(run_id="f1", step_index=3)
    assert grand.messages[:2] == any_store.load("orig").messages[:2]
    runs = ins.runs(any_store)
    assert runs.loc["f2", "parent_run"] == "f1" and runs.loc["f1", "parent_run"] == "orig"


async def test_a_suspended_fork_gets_tokens_bound_to_it(any_store: Any) -> None:
    await make_run(any_store, "orig", approve=None, signer=SIGNER)
    fork = ins.rewind(any_store, "orig", 2, new_run_id="sf", signer=SIGNER)
    assert fork.status == "suspended"
    (request,) = fork.pending_approvals
    original = any_store.load("orig").pending_approvals[0]
    assert request.token != original.token
    assert SIGNER.verify(request.token)["run_id"] == "sf"
    # The parent's token is refused on the fork; the fork's own token approves.
    model = nd.ScriptedModel(script())
    stolen = nd.ToolApprovalResponse(
        approval_id=request.approval_id, approved=True, token=original.token
    )
    denied = await nd.resume_from_checkpoint(
        any_store,
        "sf",
        model=model,
        tools=TOOLS,
        approval_responses=[stolen],
        approval_signer=SIGNER,
    )
    results = [r for m in denied.messages for r in m.tool_results if r.tool_name == "drop_table"]
    assert results[-1].is_error
    ins.rewind(any_store, "orig", 2, new_run_id="sf2", signer=SIGNER)
    good = any_store.load("sf2").pending_approvals[0]
    ok = await nd.resume_from_checkpoint(
        any_store,
        "sf2",
        model=nd.ScriptedModel(script()),
        tools=TOOLS,
        approval_responses=[
            nd.ToolApprovalResponse(approval_id=good.approval_id, approved=True, token=good.token)
        ],
        approval_signer=SIGNER,
    )
    results = [r for m in ok.messages for r in m.tool_results if r.tool_name == "drop_table"]
    assert results[-1].result == "dropped stg_2023" and not results[-1].is_error


async def test_rewind_refuses_bad_requests(any_store: Any) -> None:
    await make_run(any_store, "orig")
    with pytest.raises(nd.RunNotFoundError):
        ins.rewind(any_store, "missing", 0)
    with pytest.raises(nd.CheckpointNotFoundError):
        ins.rewind(any_store, "orig", 7)
    with pytest.raises(nd.DurableConflictError):
        ins.rewind(any_store, "orig", 0, new_run_id="orig")
    call = nd.Message(
        role="assistant", content=[nd.ToolCallPart(tool_call_id="c", tool_name="lookup")]
    )
    with pytest.raises(nd.ConfigurationError, match="tool calls"):
        ins.rewind(any_store, "orig", 0, edit=call)
    with pytest.raises(nd.ConfigurationError, match="Message or a string"):
        ins.rewind(any_store, "orig", 0, edit=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected options: new_id"):
        ins.rewind(any_store, "orig", 0, new_id="fork")  # type: ignore[call-arg]
    generated = ins.rewind(any_store, "orig", 0)
    assert generated.run_id.startswith("run-") and generated.run_id != "orig"


async def test_forks_share_the_stored_prefix(tmp_path: Any) -> None:
    path = tmp_path / "runs.db"
    with nd.open_store(f"sqlite:///{path}") as store:
        await make_run(store, "orig")

        def nodes() -> int:
            with sqlite3.connect(path) as conn:
                return int(conn.execute("SELECT count(*) FROM nodes").fetchone()[0])

        before = nodes()
        ins.rewind(store, "orig", 3, new_run_id="plain")
        assert nodes() == before  # no message copied
        ins.rewind(store, "orig", 3, new_run_id="edited", edit="Another ending?")
        assert nodes() == before + 1  # only the edited message is new


async def test_diff_of_two_steps_of_one_run(any_store: Any) -> None:
    await make_run(any_store, "orig")
    d = ins.diff(any_store, "orig", 0, step_b=3)
    added = [c for c in d.changes if c.kind == "added"]
    assert [c.role for c in added] == ["assistant", "tool", "assistant", "tool", "assistant"]
    fields = {c.item: c for c in d.changes if c.kind == "changed"}
    assert fields["status"].before == "running" and fields["status"].after == "completed"
    assert int(fields["total_tokens"].after) > int(fields["total_tokens"].before)
    assert d.common_prefix == 3
    text = str(d)
    assert text.startswith("diff orig@0 -> orig@3") and "+ message 7 (assistant)" in text
    frame = d.frame()
    assert list(frame["kind"]).count("added") == 5
    assert frame.index.name == "change"
    same = ins.diff(any_store, "orig", 3, "orig", 3)
    assert not same and "no changes" in str(same)


async def test_diff_reports_removed_messages_and_approvals(any_store: Any) -> None:
    await make_run(any_store, "orig", approve=None)
    d = ins.diff(any_store, "orig", 2, "orig", 0)
    assert [c.kind for c in d.changes if c.item == "message"] == ["removed"] * 3
    approvals = [c for c in d.changes if c.item == "approvals"]
    assert approvals[0].before.startswith("drop_table(") and approvals[0].after == "none"
    assert "<pre>" in d._repr_html_()


async def test_a_run_with_images_forks_with_its_bytes(any_store: Any) -> None:
    picture = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    prompt = nd.Message(
        role="user",
        content=[
            nd.TextPart(text="Which of these tables is stale?"),
            nd.ImagePart(data=picture, media_type="image/png"),
            nd.ImagePart(url="https://example.org/chart.png"),
        ],
    )
    await make_run(any_store, "img", prompt=prompt)
    fork = ins.rewind(any_store, "img", 0, new_run_id="img-f", edit="Only the chart, please.")
    stored = any_store.load("img-f")
    assert stored == fork
    assert stored.messages[0].content[1].data == picture
    assert ins.messages(any_store, "img-f")["images"].tolist()[0] == 2
    d = ins.diff(any_store, "img", 0, "img-f")
    assert [c.kind for c in d.changes if c.item == "message"] == ["edited"]
