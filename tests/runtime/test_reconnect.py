"""Run reconnect and cancellation (run handles, timeouts, watchers going away) and
approvals through the run handle (signed tokens)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.durable._signer import TOKEN_DENIAL_REASON
from nbdurable.runtime import Agent, DurableRuntime, RunFailedError

from .conftest import FakeClock, GatedModel, eventually


def gated_agent(gate: asyncio.Event, text: str = "answer") -> tuple[Agent, GatedModel]:
    model = GatedModel([text] * 5, mode="sequential", gate=gate)
    return Agent("a", model, version="1"), model


def approval_agent(calls: list[str]) -> Agent:
    @nd.tool(needs_approval=True)
    def drop(name: str) -> str:
        """Drop a table."""
        calls.append(name)
        return f"dropped {name}"

    model = nd.ScriptedModel([nd.Turn.call("drop", "Dropping.", name="t"), "over"])
    return Agent("dba", model, [drop], version="1")


def tool_results(messages: tuple[nd.Message, ...]) -> list[nd.ToolResultPart]:
    return [p for m in messages for p in m.content if isinstance(p, nd.ToolResultPart)]


# -- handles --------------------------------------------------------------------------------


@pytest.mark.spec("S004-14")
async def test_run_id_is_available_at_once(store: Any, reopen: Any) -> None:
    """Submit returns a handle whose run_id is usable at once, before any
    event is read or the result exists: another runtime can re-attach with it."""
    gate = asyncio.Event()
    agent, model = gated_agent(gate)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        assert isinstance(run.run_id, str) and run.run_id
        assert run.status in ("pending", "running")
        async with await DurableRuntime.open(store=reopen(store)) as other:
            again = await other.get_run(run.run_id)
            assert again.run_id == run.run_id
            assert again.status in ("pending", "running")
            gate.set()
            assert (await again.result()).text == "answer"
    assert model.calls == 1


# -- run reconnect ----------------------------------------------------------------------------


@pytest.mark.spec("S004-25")
async def test_get_run_reattaches_from_another_runtime(store: Any, reopen: Any) -> None:
    """A second runtime on the same store (another process's view, with no
    agents of its own) re-attaches to a running run; result() and stream() follow
    it to the end while the first runtime executes it."""
    gate = asyncio.Event()
    agent, model = gated_agent(gate)
    async with await DurableRuntime.open(store=store, agents=[agent]) as owner:
        run = await owner.submit("a", "hi")
        await run.wait("running")
        async with await DurableRuntime.open(store=reopen(store)) as watcher:
            handle = await watcher.get_run(run.run_id)
            waiting = asyncio.get_running_loop().create_task(handle.result())
            await asyncio.sleep(0.1)
            assert not waiting.done()
            assert handle.status == "running"
            gate.set()
            result = await asyncio.wait_for(waiting, 5)
            assert result.text == "answer"
            assert result.messages[-1] == nd.assistant("answer")
            events = [e async for e in handle.stream()]
            assert [e.offset for e in events] == list(range(1, len(events) + 1))
            assert events[-1].type == "run_finished" and events[-1].payload["state"] == "completed"
            assert events[-2].type == "run_state" and events[-2].payload["state"] == "completed"
    assert model.calls == 1


@pytest.mark.spec("S004-26")
async def test_finished_runs_reattach_with_their_stored_outcome(store: Any, reopen: Any) -> None:
    """get_run on a finished run returns a handle:
    result() gives the stored outcome (RunFailedError for a failed one), and its
    events stay replayable from offset 0; no "already completed" error."""
    ok = Agent("ok", nd.ScriptedModel(["done and dusted"]), version="1")
    bad = Agent("bad", nd.ScriptedModel(["never"], fail_on=[1]), version="1")
    async with await DurableRuntime.open(store=store, agents=[ok, bad]) as rt:
        good_run = await rt.submit("ok", "hi")
        bad_run = await rt.submit("bad", "hi")
        await good_run.wait()
        await bad_run.wait()

    async with await DurableRuntime.open(store=reopen(store)) as rt:
        good = await rt.get_run(good_run.run_id)
        assert good.status == "completed"
        result = await good.result()
        assert result.text == "done and dusted"
        assert result.usage.total_tokens > 0
        events = await asyncio.wait_for(_collect(good.stream()), 5)
        assert events[0].offset == 1 and events[-1].payload.get("state") == "completed"
        assert "run_finished" in [e.type for e in events]

        failed = await rt.get_run(bad_run.run_id)
        with pytest.raises(RunFailedError) as caught:
            await failed.result()
        assert (caught.value.state, caught.value.reason) == ("failed", "model_error")
        events = await asyncio.wait_for(_collect(failed.stream()), 5)
        assert events[-1].payload.get("state") == "failed"


async def _collect(stream: Any) -> list[nd.Event]:
    return [e async for e in stream]


@pytest.mark.spec("S004-27")
async def test_unknown_run_id_raises_run_not_found(store: Any, reopen: Any) -> None:
    """An unknown run id is a RunNotFoundError, in any runtime."""
    async with await DurableRuntime.open(store=store) as rt:
        with pytest.raises(nd.RunNotFoundError):
            await rt.get_run("run-does-not-exist")
        async with await DurableRuntime.open(store=reopen(store)) as other:
            with pytest.raises(nd.RunNotFoundError):
                await other.get_run("run-does-not-exist")


@pytest.mark.spec("S004-05", "S004-28")
async def test_cancelling_watchers_never_cancels_the_run(store: Any) -> None:
    """Cancelling a task awaiting result() or iterating stream()
    drops only that watcher; the run goes on, and a new watcher resumes the stream
    after the last offset seen, with no gap."""
    gate = asyncio.Event()
    agent, model = gated_agent(gate)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        seen: list[nd.Event] = []

        async def follow() -> None:
            async for event in run.stream():
                seen.append(event)

        loop = asyncio.get_running_loop()
        waiter = loop.create_task(run.result())
        follower = loop.create_task(follow())
        await eventually(lambda: model.entered == 1 and len(seen) >= 2)
        for task in (waiter, follower):
            task.cancel()
        for task in (waiter, follower):
            with pytest.raises(asyncio.CancelledError):
                await task
        await asyncio.sleep(0.1)
        assert run.status == "running"

        last = seen[-1].offset
        again = await rt.get_run(run.run_id)
        gate.set()
        assert (await again.result()).text == "answer"
        rest = await asyncio.wait_for(_collect(again.stream(after=last)), 5)
        assert [e.offset for e in seen + rest] == list(range(1, len(seen) + len(rest) + 1))
        assert rest[-1].payload.get("state") == "completed"


@pytest.mark.spec("S004-28")
async def test_only_run_cancel_cancels(store: Any, reopen: Any) -> None:
    """run.cancel() on a handle (here one re-attached from another runtime)
    is what cancels the run; result() then raises RunFailedError(cancelled)."""
    gate = asyncio.Event()
    agent, model = gated_agent(gate)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        await eventually(lambda: model.entered == 1)
        async with await DurableRuntime.open(store=reopen(store)) as other:
            handle = await other.get_run(run.run_id)
            await handle.cancel()
            with pytest.raises(RunFailedError) as caught:
                await asyncio.wait_for(run.result(), 5)
            assert caught.value.state == "cancelled"
    assert model.calls == 0  # the gated call never got past its gate


@pytest.mark.spec("S004-04")
async def test_cancelling_the_submitting_task_does_not_cancel_the_run(
    store: Any,
) -> None:
    """The task that submitted the run and awaits it
    does not own the run: cancelling it leaves the run going."""
    gate = asyncio.Event()
    agent, _ = gated_agent(gate)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        ids: list[str] = []

        async def submit_and_wait() -> str:
            run = await rt.submit("a", "hi")
            ids.append(run.run_id)
            return (await run.result()).text

        task = asyncio.get_running_loop().create_task(submit_and_wait())
        await eventually(lambda: bool(ids))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        run = await rt.get_run(ids[0])
        await asyncio.sleep(0.1)
        assert run.status == "running"
        gate.set()
        assert (await run.result()).text == "answer"


# -- timeouts ------------------------------------------------------------------------------


@pytest.mark.spec("S004-06", "S004-23")
async def test_timeout_is_persisted_and_not_restarted_by_reattaching(
    store: Any, reopen: Any
) -> None:
    """The timeout is a property of the run: its
    deadline is stored at submit; re-attaching neither restarts nor extends it;
    the run fails with reason timeout when it passes."""
    gate = asyncio.Event()  # never set: the model call hangs
    agent, model = gated_agent(gate)
    clock = FakeClock()
    async with await DurableRuntime.open(store=store, agents=[agent], deps=clock.deps()) as rt:
        run = await rt.submit("a", "hi", timeout=0.4)
        record = run.record()
        assert record.deadline_at == record.created_at + 400
        await eventually(lambda: model.entered == 1)
        await clock.skip(200, idle=2)  # its scheduler and its lease keeper looked again
        async with await DurableRuntime.open(store=reopen(store)) as other:
            handle = await other.get_run(run.run_id)
            assert handle.record().deadline_at == record.deadline_at
            assert handle.status == "running"  # not restarted, not extended
            await clock.skip(200)  # the deadline: the lease keeper ends the run
            with pytest.raises(RunFailedError) as caught:
                await asyncio.wait_for(handle.result(), 5)
    assert (caught.value.state, caught.value.reason) == ("failed", "timeout")
    finished = run.record()
    assert finished.deadline_at == record.deadline_at
    assert finished.updated_at == record.deadline_at


@pytest.mark.spec("S004-06")
async def test_timeout_passes_while_no_runtime_runs(store: Any, reopen: Any) -> None:
    """The deadline survives a restart: a run whose timeout passed while no
    runtime was open fails with reason timeout without calling the model again."""
    gate = asyncio.Event()
    agent, _ = gated_agent(gate)
    clock = FakeClock()
    async with await DurableRuntime.open(store=store, agents=[agent], deps=clock.deps()) as rt:
        run = await rt.submit("a", "hi", timeout=0.2)
        await run.wait("running")
    assert run.record().state == "pending"
    clock.advance(250)  # no runtime open meanwhile
    again, fresh = gated_agent(asyncio.Event())  # the same definition, in a new runtime
    async with await DurableRuntime.open(
        store=reopen(store), agents=[again], deps=clock.deps()
    ) as rt:
        handle = await rt.get_run(run.run_id)
        with pytest.raises(RunFailedError) as caught:
            await asyncio.wait_for(handle.result(), 5)
    assert caught.value.reason == "timeout"
    assert fresh.entered == 0


@pytest.mark.spec("S004-06")
async def test_no_timeout_by_default(store: Any) -> None:
    """Without `timeout` a run has no deadline."""
    async with await DurableRuntime.open(
        store=store, agents=[Agent("a", nd.ScriptedModel(["x"]), version="1")]
    ) as rt:
        run = await rt.submit("a", "hi")
        assert run.record().deadline_at is None
        await run.result()


# -- approvals through the handle ------------------------------------------------------------


async def test_approve_echoes_the_signed_token_and_runs_the_tool(store: Any) -> None:
    """run.approve() answers with the request's signed token; it verifies, so the
    approved tool runs once; pending_approvals() is empty afterwards."""
    calls: list[str] = []
    async with await DurableRuntime.open(store=store, agents=[approval_agent(calls)]) as rt:
        run = await rt.submit("dba", "drop t")
        await run.wait("waiting_approval")
        (request,) = await run.pending_approvals()
        assert (request.tool_name, request.input) == ("drop", {"name": "t"})
        claims = rt.signer.verify(request.token)
        assert claims is not None and claims["run_id"] == run.run_id
        assert calls == []
        await run.approve()
        result = await run.result()
        assert result.text == "over"
        assert calls == ["t"]
        assert [r.result for r in tool_results(result.messages)] == ["dropped t"]
        assert await run.pending_approvals() == ()
        with pytest.raises(nd.ApprovalNotPendingError, match="already approved"):
            await run.approve()  # nothing waits any more: told what was decided


async def test_forged_or_foreign_token_is_a_denial(store: Any) -> None:
    """A forged token (signed with another secret), or a genuine one of another run,
    is a denial: the tool does not run and the model sees an is_error result; the
    run goes on."""
    calls: list[str] = []
    async with await DurableRuntime.open(store=store, agents=[approval_agent(calls)]) as rt:
        forged_run = await rt.submit("dba", "drop t")
        foreign_run = await rt.submit("dba", "drop t")
        await forged_run.wait("waiting_approval")
        await foreign_run.wait("waiting_approval")
        (real,) = await forged_run.pending_approvals()
        (other,) = await foreign_run.pending_approvals()
        # Well formed, for this very call, but signed with another secret.
        forged = nd.ApprovalSigner("not-the-runtime-secret").sign(real, run_id=forged_run.run_id)
        assert forged != real.token

        await forged_run.approve(token=forged)
        await foreign_run.approve(token=real.token)
        for run in (forged_run, foreign_run):
            result = await run.result()
            (denied,) = tool_results(result.messages)
            assert denied.is_error and denied.result == TOKEN_DENIAL_REASON
        assert other.token != real.token
        assert calls == []


async def test_deny_with_reason(store: Any) -> None:
    """run.deny(reason=...) settles the call as an is_error result with that reason."""
    calls: list[str] = []
    async with await DurableRuntime.open(store=store, agents=[approval_agent(calls)]) as rt:
        run = await rt.submit("dba", "drop t")
        await run.wait("waiting_approval")
        await run.deny(reason="not on a Friday")
        (denied,) = tool_results((await run.result()).messages)
        assert denied.is_error and denied.result == "not on a Friday"
        assert calls == []


@pytest.mark.spec("S004-24")
async def test_approval_settled_while_disconnected_is_not_asked_again(
    store: Any, reopen: Any
) -> None:
    """A subscriber that left while an approval was pending, reconnecting
    after the approval was given elsewhere, folds a view with no pending approval."""
    calls: list[str] = []
    async with await DurableRuntime.open(store=store, agents=[approval_agent(calls)]) as rt:
        run = await rt.submit("dba", "drop t")
        seen: list[nd.Event] = []
        async for event in run.stream():
            seen.append(event)
            if event.type == "tool_approval_request":
                break  # the subscriber goes away here
        view = nd.fold_events(seen)
        assert list(view.pending_approvals) != []

        async with await DurableRuntime.open(store=reopen(store)) as other:
            await (await other.get_run(run.run_id)).wait("waiting_approval")
            await (await other.get_run(run.run_id)).approve()
        await run.result()

        rest = await asyncio.wait_for(_collect(run.stream(after=seen[-1].offset)), 5)
        for event in rest:
            view.apply(event)
        assert dict(view.pending_approvals) == {}
        assert "approval_resolved" in [e.type for e in rest]
        assert calls == ["t"]


async def test_approval_secret_file_is_shared_by_runtimes_on_one_store(tmp_path: Path) -> None:
    """The approval secret is generated once into a 0600 file beside a SQLite store;
    a runtime opened later on the same file (a restarted kernel) reads it, so a
    token signed before the restart still verifies and the tool runs."""
    if os.environ.get("NBDURABLE_APPROVAL_SECRET"):
        pytest.skip("the environment's secret takes precedence over the file")
    calls: list[str] = []
    url = f"sqlite:///{tmp_path}/runs.db"
    first = nd.open_store(url)
    try:
        async with await DurableRuntime.open(store=first, agents=[approval_agent(calls)]) as rt:
            run = await rt.submit("dba", "drop t")
            await run.wait("waiting_approval")
            (request,) = await run.pending_approvals()
    finally:
        first.close()
    key = tmp_path / "approval.key"
    assert key.exists()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600

    second = nd.open_store(url)
    try:
        async with await DurableRuntime.open(store=second, agents=[approval_agent(calls)]) as rt:
            handle = await rt.get_run(run.run_id)
            assert rt.signer.verify(request.token) is not None
            await handle.approve()
            assert (await handle.result()).text == "over"
    finally:
        second.close()
    assert calls == ["t"]
