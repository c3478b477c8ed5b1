"""Custom durable tasks: define_task, phases checkpointed, max_concurrent_tasks, owned agent
runs with ctx.spawn_agent (issue 10)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.models._base import ModelRequest
from nbdurable.runtime import Agent, DurableRuntime, Limits, RunFailedError, TaskRun

from .conftest import FakeClock, GatedModel, eventually


def echo(agent_id: str, **kwargs: Any) -> Agent:
    def turn(request: ModelRequest) -> nd.Turn:
        first = next(m for m in request.messages if m.role == "user")
        return nd.Turn(text=f"{agent_id}({first.text})")

    return Agent(agent_id, nd.ScriptedModel([turn] * 200, mode="sequential"), version="1", **kwargs)


@pytest.mark.spec("S003-03", "S003-19")
async def test_tasks_are_defined_with_define_task_and_fixed_at_open(
    store: Any,
) -> None:
    """define_task validates eagerly; open() takes the definitions
    (a repeated name is refused); nothing adds tasks later; an unknown task is refused."""

    async def one(ctx: nd.TaskContext, state: Any) -> Any:
        return state

    async def two(ctx: nd.TaskContext, state: Any) -> Any:
        return state

    with pytest.raises(nd.ConfigurationError):
        nd.define_task("empty")
    with pytest.raises(nd.ConfigurationError):
        nd.define_task("  ", one)
    with pytest.raises(nd.ConfigurationError):
        nd.define_task("dup", one, one)
    with pytest.raises(nd.ConfigurationError):
        nd.define_task("bad", one, "not a phase")  # type: ignore[arg-type]
    with pytest.raises(nd.ConfigurationError):
        nd.define_task("v", one, version=" ")
    task = nd.define_task("t", one, two)
    assert task.phase_names == ["one", "two"]
    with pytest.raises(nd.ConfigurationError, match="twice"):
        await DurableRuntime.open(store=store, tasks=[task, nd.define_task("t", one)])
    async with await DurableRuntime.open(store=store, tasks=[task]) as rt:
        assert list(rt.tasks) == ["t"]
        assert not hasattr(rt, "register_tasks") and not hasattr(rt, "define_task")
        with pytest.raises(nd.ConfigurationError, match="define_task"):
            await rt.submit_task("unknown", {})
        with pytest.raises(nd.ConfigurationError):
            await rt.submit_task("t", {"not json": object()})
        assert await (await rt.submit_task("t", {"n": 1})).result() == {"n": 1}


async def test_phases_run_in_order_and_each_state_is_checkpointed(store: Any) -> None:
    """Each phase gets the previous phase's state; the returned JSON state is
    checkpointed (the run's journal) and logged before the next phase starts."""
    pytest.importorskip("pandas", reason="the inspect extra is not installed")
    seen: list[tuple[str, Any]] = []

    async def fetch(ctx: nd.TaskContext, state: Any) -> Any:
        seen.append((ctx.phase, state))
        return {**state, "rows": [1, 2, 3]}

    async def total(ctx: nd.TaskContext, state: Any) -> Any:
        seen.append((ctx.phase, state))
        assert ctx.phase_index == 1 and ctx.task.name == "etl"
        checkpointed = store.rt_journaled(ctx.run_id, 0)
        assert checkpointed == '{"rows":[1,2,3],"table":"t"}'
        return {"total": sum(state["rows"])}

    def report(ctx: nd.TaskContext, state: Any) -> Any:  # a plain function works too
        seen.append((ctx.phase, state))
        return f"total is {state['total']}"

    etl = nd.define_task("etl", fetch, total, report, version="2")
    async with await DurableRuntime.open(store=store, tasks=[etl]) as rt:
        run = await rt.submit_task("etl", {"table": "t"})
        assert isinstance(run, TaskRun)
        assert await run.result() == "total is 6"
        record = run.record()
        assert isinstance(await rt.get_run(run.run_id), TaskRun)
    assert [p for p, _ in seen] == ["fetch", "total", "report"]
    assert seen[1][1] == {"table": "t", "rows": [1, 2, 3]}
    assert (record.kind, record.agent_id, record.agent_version, record.phase) == (
        "task",
        "etl",
        "2",
        3,
    )
    events = await nd.read_events(store, run.run_id)
    phases = [e.payload["phase"] for e in events if e.type == "task_phase"]
    assert phases == ["fetch", "total", "report"]
    assert run.state() == "total is 6"
    row = nd.inspect.runs(store).loc[run.run_id]
    assert (row["kind"], row["agent"], row["steps"], row["status"]) == (
        "task",
        "etl",
        3,
        "completed",
    )


@pytest.mark.spec("S003-02")
async def test_spawn_agent_runs_owned_agents_and_a_rerun_phase_reattaches_to_them(
    store: Any, reopen: Any
) -> None:
    """Owned agents run registrations of the agents option.
    ctx.spawn_agent submits an owned run with id f"{task}:{phase}:{n}" and awaits its
    result; when the phase runs again (its owner went away mid-phase), the same calls
    re-attach to the same runs: nothing is spawned or executed twice."""
    pytest.importorskip("pandas", reason="the inspect extra is not installed")
    model = GatedModel(["summary"] * 10, mode="sequential")
    summarizer = Agent("summarizer", model, version="1")
    release = asyncio.Event()
    phase_runs: list[int] = []

    async def summarize(ctx: nd.TaskContext, state: Any) -> Any:
        phase_runs.append(ctx.phase_index)
        first, second = await asyncio.gather(
            ctx.spawn_agent("summarizer", "part one"), ctx.spawn_agent("summarizer", "part two")
        )
        await release.wait()  # the first owner is stopped here
        return {"parts": [first.text, second.text], "ids": [first.run_id, second.run_id]}

    task = nd.define_task("digest", summarize)
    rt = await DurableRuntime.open(store=store, agents=[summarizer], tasks=[task])
    run = await rt.submit_task("digest", None, run_id="task-1")
    await eventually(lambda: len(rt.list_runs("completed")) == 2)
    await rt.close()  # shutdown mid-phase: the task goes back to pending
    assert run.status == "pending"
    second_store = reopen(store)
    release.set()
    async with await DurableRuntime.open(
        store=second_store, agents=[summarizer], tasks=[task]
    ) as rt2:
        again = await rt2.get_run("task-1")
        state = await again.result()
        children = again.children()  # type: ignore[attr-defined]
    assert state["ids"] == ["task-1:summarize:0", "task-1:summarize:1"]
    assert state["parts"] == ["summary", "summary"]
    assert phase_runs == [0, 0]  # the phase ran twice ...
    assert model.entered == 2  # ... each owned run executed once
    # spawned at once (asyncio.gather): either may have been submitted first
    assert sorted(c.run_id for c in children) == ["task-1:summarize:0", "task-1:summarize:1"]
    owned = second_store.rt_get("task-1:summarize:0")
    assert owned.owner_run_id == "task-1" and owned.kind == "agent"
    frame = nd.inspect.runs(second_store)
    assert frame.loc["task-1:summarize:1", "owner_run"] == "task-1"


@pytest.mark.spec("S003-05")
async def test_max_concurrent_tasks_caps_phases_apart_from_agent_runs(
    store: Any,
) -> None:
    """At most max_concurrent_tasks phases run at once; agent runs use their
    own capacity (an agent run completes while the task slots are full)."""
    gate = asyncio.Event()
    active = {"now": 0, "peak": 0}

    async def hold(ctx: nd.TaskContext, state: Any) -> Any:
        active["now"] += 1
        active["peak"] = max(active["peak"], active["now"])
        try:
            await gate.wait()
        finally:
            active["now"] -= 1
        return state

    async with await DurableRuntime.open(
        store=store,
        agents=[echo("a")],
        tasks=[nd.define_task("hold", hold)],
        max_concurrent_tasks=2,
        max_concurrent_runs=1,
    ) as rt:
        runs = [await rt.submit_task("hold", i) for i in range(5)]
        await eventually(lambda: active["now"] == 2)
        await asyncio.sleep(0.2)
        assert active["peak"] == 2
        assert sorted(r.status for r in runs).count("pending") == 3
        agent_run = await rt.submit("a", "meanwhile")
        assert (await agent_run.result()).text == "a(meanwhile)"
        gate.set()
        assert [await r.result() for r in runs] == [0, 1, 2, 3, 4]
    assert active["peak"] == 2


async def test_max_pending_tasks_counts_tasks_apart_from_runs(store: Any) -> None:
    """limits.max_pending_tasks bounds unfinished tasks; agent runs are counted apart."""

    async def wait(ctx: nd.TaskContext, state: Any) -> Any:
        await asyncio.sleep(10)
        return state

    async with await DurableRuntime.open(
        store=store,
        agents=[echo("a")],
        tasks=[nd.define_task("wait", wait)],
        limits=Limits(max_pending_tasks=1, max_pending_runs=1),
    ) as rt:
        task = await rt.submit_task("wait", 1)
        with pytest.raises(nd.LimitExceededError, match="max_pending_tasks"):
            await rt.submit_task("wait", 2)
        assert (await (await rt.submit("a", "hi")).result()).text == "a(hi)"
        await task.cancel()
        assert task.status in ("cancelling", "cancelled")


@pytest.mark.spec("S003-13")
async def test_a_phase_spawning_an_unregistered_agent_fails_clearly(store: Any) -> None:
    """A phase that spawns an agent that is not registered fails the task with a clear
    error; a task declaring agents=[...] is refused at submit while one is missing,
    and keeps unregister_agent from removing them while it is unfinished."""
    gate = asyncio.Event()

    async def call_ghost(ctx: nd.TaskContext, state: Any) -> Any:
        return (await ctx.spawn_agent("ghost", "boo")).text

    async def call_helper(ctx: nd.TaskContext, state: Any) -> Any:
        await gate.wait()
        return (await ctx.spawn_agent("helper", "help")).text

    ghostly = nd.define_task("ghostly", call_ghost)
    declared = nd.define_task("declared", call_helper, agents=["helper"])
    async with await DurableRuntime.open(store=store, tasks=[ghostly, declared]) as rt:
        run = await rt.submit_task("ghostly", None)
        with pytest.raises(RunFailedError):
            await run.result()
        record = run.record()
        assert record.reason == "error" and "'ghost'" in (record.error or "")
        assert "not registered" in (record.error or "")
        with pytest.raises(nd.ConfigurationError, match="helper"):
            await rt.submit_task("declared", None)
        rt.register_agents([echo("helper")])  # tasks use it at once
        waiting = await rt.submit_task("declared", None)
        await waiting.wait("running")
        with pytest.raises(nd.DurableConflictError):
            rt.unregister_agent("helper")
        gate.set()
        assert await waiting.result() == "helper(help)"
        assert rt.unregister_agent("helper") is True


@pytest.mark.spec("S003-17")
async def test_a_declared_agent_missing_after_a_restart_parks_the_task_until_restored(
    store: Any, reopen: Any
) -> None:
    """A recovered task whose declared agent is not registered yet is
    not executed; once the host registers it, the task runs."""

    async def call_helper(ctx: nd.TaskContext, state: Any) -> Any:
        return (await ctx.spawn_agent("helper", "help")).text

    declared = nd.define_task("declared", call_helper, agents=["helper"])
    client = DurableRuntime(store=store, agents=[echo("helper")], tasks=[declared])
    run = await client.submit_task("declared", None)  # submitted, never executed here
    clock = FakeClock()
    async with await DurableRuntime.open(
        store=reopen(store), tasks=[declared], deps=clock.deps()
    ) as rt:
        await clock.skip(60_000)  # the engine looked again: it cannot run the task
        assert run.status == "pending"
        rt.register_agents([echo("helper")])
        assert await (await rt.get_run(run.run_id)).result() == "helper(help)"


@pytest.mark.spec("S003-32", "S003-37")
async def test_owned_runs_take_submit_prompts_stream_and_approvals(
    store: Any,
) -> None:
    """ctx.spawn_agent takes the prompt shapes of submit (a user message with
    media; a blank prompt is refused at the call). An owned run of a streaming
    agent persists deltas. Approvals apply: the task waits while its owned run waits."""

    @nd.tool(needs_approval=True)
    def publish(channel: str) -> str:
        """Publish."""
        return f"published to {channel}"

    publisher = Agent(
        "publisher",
        nd.ScriptedModel([nd.Turn.call("publish", channel="news"), "published."]),
        [publish],
        version="1",
    )
    streamer = Agent("streamer", nd.ScriptedModel(["streamed"]), version="1", stream=True)
    image = nd.ImagePart(url="https://example.com/chart.png", media_type="image/png")
    refused: list[str] = []

    async def draft(ctx: nd.TaskContext, state: Any) -> Any:
        try:
            ctx.spawn_agent("streamer", "   ")
        except nd.ConfigurationError as exc:
            refused.append(str(exc))
        prompt = nd.Message(role="user", content=[nd.TextPart(text="describe"), image])
        return {"draft": (await ctx.spawn_agent("streamer", prompt)).text}

    async def ship(ctx: nd.TaskContext, state: Any) -> Any:
        return {**state, "shipped": (await ctx.spawn_agent("publisher", state["draft"])).text}

    task = nd.define_task("post", draft, ship)
    async with await DurableRuntime.open(
        store=store, agents=[publisher, streamer], tasks=[task]
    ) as rt:
        run = await rt.submit_task("post", None, run_id="post-1")
        child = await eventually_run(rt, "post-1:ship:0")
        await child.wait("waiting_approval")
        assert run.status == "running"  # the phase awaits its owned run
        await child.approve()
        assert await run.result() == {"draft": "streamed", "shipped": "published."}
        drafted = await rt.get_run("post-1:draft:1")
        events = [e async for e in drafted.stream()]
    assert refused and "blank" in refused[0]
    assert drafted.record().stream is True
    assert any(e.type == "model_delta" for e in events)
    assert store.load("post-1:draft:1").messages[0].content[1] == image


async def eventually_run(rt: DurableRuntime, run_id: str) -> nd.Run:
    """The run once it exists."""
    await eventually(lambda: rt.runtime_store.rt_get(run_id) is not None)
    return await rt.get_run(run_id)


async def test_a_failed_phase_is_retried_from_its_checkpoint_and_cancel_reaches_owned_runs(
    store: Any,
) -> None:
    """A phase that raises fails the task (reason error); retry() re-runs that phase from
    the last checkpointed state, not the earlier phases. Cancelling a task cancels its
    unfinished owned runs."""
    calls: list[str] = []
    broken = {"yes": True}

    async def first(ctx: nd.TaskContext, state: Any) -> Any:
        calls.append("first")
        return state + 1

    async def second(ctx: nd.TaskContext, state: Any) -> Any:
        calls.append("second")
        if broken["yes"]:
            raise ValueError("not today")
        return state + 10

    @nd.tool(needs_approval=True)
    def act() -> str:
        """Act."""
        return "acted"

    waiter = Agent("waiter", nd.ScriptedModel([nd.Turn.call("act"), "ok"]), [act], version="1")

    async def spawn_and_wait(ctx: nd.TaskContext, state: Any) -> Any:
        return (await ctx.spawn_agent("waiter", "go")).text

    tasks = [nd.define_task("two", first, second), nd.define_task("spawner", spawn_and_wait)]
    async with await DurableRuntime.open(store=store, agents=[waiter], tasks=tasks) as rt:
        run = await rt.submit_task("two", 0)
        with pytest.raises(RunFailedError):
            await run.result()
        assert run.record().error == "ValueError: not today"
        broken["yes"] = False
        await run.retry()
        assert await run.result() == 11
        assert calls == ["first", "second", "second"]

        spawner = await rt.submit_task("spawner", None, run_id="sp")
        child = await eventually_run(rt, "sp:spawn_and_wait:0")
        await child.wait("waiting_approval")
        await spawner.cancel()
        await spawner.wait()
        await child.wait()
        assert spawner.status == "cancelled" and child.status == "cancelled"
