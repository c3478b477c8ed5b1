"""Forks of runtime runs, and explain() on every kind of run state."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

import nbdurable as nd
from nbdurable import inspect as ins
from nbdurable.runs import RunPatch
from nbdurable.runtime import Agent, DurableRuntime, ModelRetry

from .conftest import TOOLS, make_run, script


def janitor(**kwargs: Any) -> Agent:
    return Agent("janitor", nd.ScriptedModel(script()), TOOLS, version="1", **kwargs)


async def test_a_fork_of_a_runtime_run_runs_under_the_parents_agent(runs_store: Any) -> None:
    async with DurableRuntime(store=runs_store, agents=[janitor()]) as runtime:
        run = await runtime.submit("janitor", "Clean up stale staging tables.")
        await run.wait("waiting_approval")
        await run.approve()
        assert (await run.result()).text == "Done: dropped stg_2023."
        fork = await runtime.fork(run.run_id, 1, new_run_id="fork-1")
        await fork.wait("waiting_approval")  # it ran step 2 again and stopped at the gate
        assert runtime.runtime_store.rt_get("fork-1").agent_version == "1"
        await fork.deny(reason="not this time")
        result = await fork.result()
        assert result.text == "Done: dropped stg_2023."
        frame = ins.runs(runs_store)
        assert frame.loc["fork-1", "parent_run"] == run.run_id
        assert frame.loc["fork-1", "status"] == "completed"
        assert frame.loc["fork-1", "agent"] == "janitor"
        assert frame.loc["fork-1", "session_id"] != frame.loc[run.run_id, "session_id"]
        # The original run is untouched.
        assert runtime.runtime_store.rt_get(run.run_id).state == "completed"
        denied = ins.messages(runs_store, "fork-1")
        assert denied["is_error"].any()
        with pytest.raises(nd.RunNotFoundError):
            await runtime.fork("missing", 0)


async def test_rewind_of_a_runtime_run_at_a_gate_waits_for_approval(runs_store: Any) -> None:
    async with DurableRuntime(store=runs_store, agents=[janitor()]) as runtime:
        run = await runtime.submit("janitor", "Clean up stale staging tables.")
        await run.wait("waiting_approval")
        fork = await runtime.fork(run.run_id, 2, new_run_id="gate")
        assert fork.status == "waiting_approval"
        (request,) = await fork.pending_approvals()
        assert runtime.signer.verify(request.token)["run_id"] == "gate"
        await fork.approve()
        assert (await fork.result()).text == "Done: dropped stg_2023."
        assert run.status == "waiting_approval"
        edited = await runtime.fork(run.run_id, 2, new_run_id="done", edit=nd.assistant("No."))
        assert edited.status == "completed"


async def test_explain_a_run_waiting_for_approval_then_completed(runs_store: Any) -> None:
    async with DurableRuntime(store=runs_store, agents=[janitor()]) as runtime:
        run = await runtime.submit("janitor", "Clean up stale staging tables.")
        await run.wait("waiting_approval")
        (request,) = await run.pending_approvals()
        issued = runtime.signer.verify(request.token)["issued_at"]
        why = ins.explain(runs_store, run.run_id, now=issued + 90_000)
        assert why.status == "waiting_approval"
        assert why.summary == "Waiting for 1 approval(s) at step 2."
        (pending,) = why.approvals
        assert (pending.tool_name, pending.args, pending.age_s) == (
            "drop_table",
            {"name": "stg_2023"},
            90.0,
        )
        text = str(why)
        assert 'drop_table(name="stg_2023")' in text and "asked 90.0 s ago" in text
        assert why.actions == (
            f"run = await runtime.get_run({run.run_id!r})",
            "await run.approve(approval_id)  or  await run.deny(approval_id, reason=...)",
        )
        terminal = ins.explain(runs_store, run.run_id, context="terminal")
        assert f"nbdurable runs approve {run.run_id}" in str(terminal)
        assert "await" not in str(terminal) and terminal.context == "terminal"
        assert why.to_dict()["approvals"][0]["approval_id"] == request.approval_id
        await run.approve()
        await run.result()
        done = ins.explain(runs_store, run.run_id)
        assert done.summary == "Completed at step 3 (finish reason: stop)."
        assert "<b>" in done._repr_html_()


async def test_explain_failed_retry_wait_queued_and_pending(runs_store: Any) -> None:
    broken = Agent(
        "broken",
        nd.ScriptedModel(["never"], fail_on={1: RuntimeError("provider down")}),
        version="1",
    )
    flaky = Agent(
        "flaky",
        nd.ScriptedModel(["never"], fail_on={1: TimeoutError("slow provider")}),
        version="1",
        model_retry=ModelRetry(max_attempts=3, initial_delay_ms=600_000, max_delay_ms=600_000),
    )
    async with DurableRuntime(store=runs_store, agents=[broken, flaky, janitor()]) as runtime:
        failed = await runtime.submit("broken", "go")
        await failed.wait("failed")
        why = ins.explain(runs_store, failed.run_id)
        assert why.summary == "Failed: model_error."
        assert any("RuntimeError: provider down" in line for line in why.details)
        assert why.actions[-1] == "await run.retry()"
        terminal = ins.explain(runs_store, failed.run_id, context="terminal")
        assert terminal.actions == (f"nbdurable runs retry {failed.run_id}",)
        notebook = ins.explain(runs_store, failed.run_id, context="notebook")
        assert notebook.actions == (f"%durable retry {failed.run_id}",)

        waiting = await runtime.submit("flaky", "go")
        record = await waiting.wait("retry_wait")
        why = ins.explain(runs_store, waiting.run_id, now=record.next_attempt_at - 30_000)
        assert why.summary.startswith("The model call failed; attempt 2 starts at ")
        assert why.summary.endswith("(in 30.0 s).")
        assert any("TimeoutError: slow provider" in line for line in why.details)

        first = await runtime.submit("janitor", "one", session_id="s")
        await first.wait("waiting_approval")
        second = await runtime.submit("janitor", "two", session_id="s", enqueue=True)
        why = ins.explain(runs_store, second.run_id)
        assert why.status == "queued"
        assert why.summary.startswith(f"Queued behind {first.run_id} (waiting_approval)")
        await waiting.cancel()

    idle = DurableRuntime(store=runs_store, agents=[janitor()])  # not started: nothing executes
    pending = await idle.submit("janitor", "later")
    why = ins.explain(runs_store, pending.run_id, context="terminal")
    assert why.status == "pending" and "nbdurable worker" in str(why)
    why = ins.explain(runs_store, pending.run_id, context="notebook")
    assert why.actions == (
        f"run the cell defining agent 'janitor' version '1', then %durable resume {pending.run_id}",
    )


async def test_explain_a_run_whose_owner_is_gone_and_one_needing_attention(
    runs_store: Any,
) -> None:
    idle = DurableRuntime(store=runs_store, agents=[janitor()])
    run = await idle.submit("janitor", "later")
    now = idle.now()
    # What a SIGKILLed worker leaves behind: running, with a lease nobody renews.
    idle.runtime_store.rt_update(
        run.run_id, RunPatch(state="running", lease_owner="worker-7", lease_expires_at=now - 5000)
    )
    why = ins.explain(runs_store, run.run_id, now=now)
    assert why.summary == (
        "Marked running, but its owner worker-7 is gone: the lease expired 5.0 s ago."
    )
    idle.runtime_store.rt_update(run.run_id, RunPatch(lease_expires_at=now + 20_000))
    assert ins.explain(runs_store, run.run_id, now=now).summary == (
        "Executing in worker-7; lease valid for 20.0 s."
    )
    reason = "tool 'drop_table' (call c1) was interrupted and its recovery is manual"
    idle.runtime_store.rt_update(run.run_id, RunPatch(state="needs_attention", reason=reason))
    why = ins.explain(runs_store, run.run_id)
    assert why.summary == f"Needs a human: {reason}."
    assert any("run.retry()" in action for action in why.actions)


async def test_explain_runs_of_the_loop_api(any_store: Any) -> None:
    await make_run(any_store, "s", approve=None)
    why = ins.explain(any_store, "s")
    assert why.status == "suspended"
    assert why.summary == "Suspended at step 2, waiting for 1 approval(s)."
    assert "resume_from_checkpoint(store, run_id" in str(why)
    ins.rewind(any_store, "s", 1, new_run_id="f")
    forked = ins.explain(any_store, "f")
    assert forked.status == "running" and "forked from s at step 1" in str(forked)
    await make_run(any_store, "c")
    assert ins.explain(any_store, "c").summary == "Completed at step 3 (finish reason: stop)."
    with pytest.raises(nd.RunNotFoundError):
        ins.explain(any_store, "nope")


async def test_explain_names_the_sub_agent_of_a_pending_approval(any_store: Any) -> None:
    child = nd.agent_tool(
        "cleaner",
        model=nd.ScriptedModel([nd.Turn.call("drop_table", name="stg_1"), "ok"]),
        tools=TOOLS,
    )
    parent = nd.ScriptedModel([nd.Turn.call("cleaner", prompt="drop stg_1"), "done"])
    result = await nd.generate_text(
        model=parent,
        messages=[nd.user("delegate")],
        tools=[child],
        session=nd.DurableSession(any_store, run_id="p"),
    )
    assert result.status == "suspended"
    why = ins.explain(any_store, "p")
    assert why.approvals[0].agent_path == ("cleaner",)
    assert "in sub-agent cleaner" in str(why)


async def test_next_steps_fit_where_the_reader_is(runs_store: Any) -> None:
    idle = DurableRuntime(store=runs_store, agents=[janitor()])
    run = await idle.submit("janitor", "later")
    reason = "tool 'drop_table' (call c1) was interrupted and its recovery is manual"
    idle.runtime_store.rt_update(run.run_id, RunPatch(state="needs_attention", reason=reason))
    rid = run.run_id
    api = ins.explain(runs_store, rid)
    assert api.context == "api" and api.actions[0] == f"run = await runtime.get_run({rid!r})"
    assert "await run.retry()" in api.actions[1]
    notebook = ins.explain(runs_store, rid, context="notebook")
    assert notebook.actions[0] == f"%durable retry {rid}  (runs the interrupted tool again)"
    assert notebook.actions[1].startswith(f'%durable settle {rid} --reason "..."')
    terminal = ins.explain(runs_store, rid, context="terminal")
    assert terminal.actions[0].startswith(f"nbdurable runs retry {rid} --agents module:attr")
    assert terminal.actions[1].startswith(f'nbdurable runs deny {rid} --reason "..."')
    for why in (notebook, terminal):
        assert "await" not in str(why)  # no `run` variable where the reader is
    assert "%durable" not in str(api) + str(terminal)
    assert "nbdurable runs" not in str(api) + str(notebook)
    with pytest.raises(nd.ConfigurationError, match="context must be one of"):
        ins.explain(runs_store, rid, context="shell")  # type: ignore[arg-type]


async def test_the_html_view_shows_the_same_lines_as_the_text(runs_store: Any) -> None:
    async with DurableRuntime(store=runs_store, agents=[janitor()]) as runtime:
        run = await runtime.submit("janitor", "Clean up stale staging tables.")
        await run.wait("waiting_approval")
        why = ins.explain(runs_store, run.run_id, context="notebook")
    page = why._repr_html_()
    shown = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert shown == str(why)
    assert "  Next:" in str(why) and str(why).splitlines()[0] == f"{run.run_id}: waiting_approval"
