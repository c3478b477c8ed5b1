"""Runtime options and agent registrations."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime, Limits, ModelRetry

from .conftest import FakeClock, GatedModel, GenerateOnlyModel, eventually


def make_work_tool(calls: list[str], gate: asyncio.Event | None = None) -> nd.Tool:
    @nd.tool
    async def work(item: str) -> str:
        """Do some work on an item."""
        calls.append(item)
        if gate is not None:
            await gate.wait()
        return f"done {item}"

    return work


def tool_agent(agent_id: str = "a", version: str = "1", **kwargs: Any) -> Agent:
    """An agent that calls ``work`` once, then answers "finished"."""
    calls = kwargs.pop("calls", [])
    gate = kwargs.pop("gate", None)
    model = nd.ScriptedModel([nd.Turn.call("work", item="x"), "finished"])
    return Agent(agent_id, model, [make_work_tool(calls, gate)], version=version, **kwargs)


def text_agent(
    agent_id: str = "a", version: str = "1", text: str = "hello", **kwargs: Any
) -> Agent:
    return Agent(agent_id, nd.ScriptedModel([text] * 20), version=version, **kwargs)


# -- runtime options -------------------------------------------------------------------


@pytest.mark.spec("S003-01")
async def test_open_requires_a_store_with_run_records(tmp_path: Path) -> None:
    """There is no default store; one that keeps no run records is refused."""
    with pytest.raises(TypeError):
        await DurableRuntime.open()  # type: ignore[call-arg]
    with pytest.raises(nd.ConfigurationError):
        await DurableRuntime.open(store=None)
    jsonl = nd.open_store(f"jsonl:///{tmp_path}/logs")
    try:
        with pytest.raises(nd.ConfigurationError, match="run records"):
            await DurableRuntime.open(store=jsonl)
    finally:
        jsonl.close()


@pytest.mark.spec("S003-01")
async def test_open_with_a_sqlite_store(tmp_path: Path) -> None:
    """A SQLite store (the usual choice) opens a runtime that runs agents."""
    store = nd.SqliteSessionStore(tmp_path / "runs.db")
    try:
        async with await DurableRuntime.open(store=store, agents=[text_agent()]) as rt:
            run = await rt.submit("a", "hi")
            assert (await run.result()).text == "hello"
    finally:
        store.close()


@pytest.mark.spec("S003-02")
async def test_agents_default_to_an_empty_list(store: Any) -> None:
    """`agents` defaults to []: nothing can be submitted until registered."""
    async with await DurableRuntime.open(store=store) as rt:
        assert rt.registry.ids() == []
        with pytest.raises(nd.ConfigurationError, match="no agent"):
            await rt.submit("a", "hi")
        rt.register_agents([text_agent()])
        assert (await (await rt.submit("a", "hi")).result()).text == "hello"


@pytest.mark.spec("S003-03", "S003-19")
async def test_tasks_default_empty_and_only_define_task_values(
    store: Any,
) -> None:
    """`tasks` defaults to []; only define_task() definitions are
    accepted, and there is no way to add tasks at runtime (tests/runtime/test_tasks.py
    has the rest)."""
    async with await DurableRuntime.open(store=store) as rt:
        assert rt.tasks == {}
        assert not hasattr(rt, "register_tasks")
        assert not hasattr(rt, "define_task")
    with pytest.raises(nd.ConfigurationError, match="define_task"):
        await DurableRuntime.open(store=store, tasks=[object()])


@pytest.mark.spec("S003-04", "S003-05")
@pytest.mark.parametrize("name", ["max_concurrent_runs", "max_concurrent_tasks"])
async def test_concurrency_options_default_and_range_1_to_1000(store: Any, name: str) -> None:
    """Runs default to 100 (issue 42: agents mostly wait on their models), task phases to 4;
    both must be integers from 1 to 1000."""
    async with await DurableRuntime.open(store=store) as rt:
        assert getattr(rt, name) == (100 if name == "max_concurrent_runs" else 4)
    for good in (1, 1000):
        async with await DurableRuntime.open(store=store, **{name: good}) as rt:
            assert getattr(rt, name) == good
    for bad in (0, -1, 1001, 2.0, "4", True, None):
        with pytest.raises(nd.ConfigurationError, match=name):
            await DurableRuntime.open(store=store, **{name: bad})


@pytest.mark.spec("S003-06")
async def test_on_fatal_error_defaults_to_none(store: Any) -> None:
    """No fatal-error callback unless one is given."""
    async with await DurableRuntime.open(store=store) as rt:
        assert rt.on_fatal_error is None


@pytest.mark.spec("S003-06")
async def test_on_fatal_error_called_once_and_runs_left_as_they_were(
    tmp_path: Path,
) -> None:
    """A storage failure the scheduler cannot pass (a corrupt schema) calls
    on_fatal_error exactly once; the runtime stops taking work; runs stay as they were."""
    path = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(path)
    calls: list[BaseException] = []
    try:
        # A run submitted without a scheduler stays pending.
        idle = DurableRuntime(store=store, agents=[text_agent()])
        run = await idle.submit("a", "hi")
        assert run.status == "pending"

        rt = await DurableRuntime.open(store=store, on_fatal_error=calls.append)
        try:
            other = sqlite3.connect(path)
            other.execute("ALTER TABLE rt_runs RENAME TO rt_runs_broken")
            other.commit()
            await eventually(lambda: len(calls) == 1)
            await asyncio.sleep(0.3)  # many poll intervals: still exactly one call
            assert len(calls) == 1
            assert isinstance(calls[0], Exception)
            other.execute("ALTER TABLE rt_runs_broken RENAME TO rt_runs")
            other.commit()
            other.close()
            # The runtime took no work after the failure, even with the agent back.
            rt.register_agents([text_agent()])
            await asyncio.sleep(0.3)
            assert run.status == "pending"
        finally:
            await rt.close()
        assert run.record().lease_owner is None
    finally:
        store.close()


@pytest.mark.spec("S003-06")
async def test_close_after_a_fatal_error_abandons_in_flight_runs_cleanly(
    tmp_path: Path,
) -> None:
    """After a fatal failure, close() still abandons the run that was executing
    (its model call is cancelled) and hands it back as pending: nothing is marked
    failed, and nothing keeps running after close()."""
    path = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(path)
    calls: list[BaseException] = []
    model = GatedModel(["ok"], gate=asyncio.Event())
    try:
        rt = await DurableRuntime.open(
            store=store, agents=[Agent("a", model, version="1")], on_fatal_error=calls.append
        )
        try:
            run = await rt.submit("a", "hi")
            await eventually(lambda: model.active == 1)
            other = sqlite3.connect(path)
            other.execute("ALTER TABLE rt_runs RENAME TO rt_runs_broken")
            other.commit()
            await eventually(lambda: len(calls) == 1)
            other.execute("ALTER TABLE rt_runs_broken RENAME TO rt_runs")
            other.commit()
            other.close()
            assert model.active == 1  # still in flight
        finally:
            await rt.close()
        assert model.active == 0
        assert run.record().state == "pending"
        assert len(calls) == 1
    finally:
        store.close()


# -- agent registrations ------------------------------------------------------------------


@pytest.mark.spec("S003-07")
async def test_registration_fields_and_defaults(store: Any) -> None:
    """Agent id, version, stream, tool_recovery, model_retry (opt-in)."""
    agent = text_agent()
    assert agent.stream is True  # the default: stream when the model can (ScriptedModel can)
    assert Agent("g", GenerateOnlyModel(["hi"]), version="1").stream is False
    assert text_agent(stream=False).stream is False
    assert dict(agent.tool_recovery) == {}
    assert agent.model_retry is None and agent.retry_policy is None
    retrying = text_agent(model_retry={"max_attempts": 2})
    assert retrying.retry_policy == ModelRetry(max_attempts=2)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        await run.result()
        record = run.record()
        assert (record.agent_id, record.agent_version) == ("a", "1")
        assert record.stream is True and record.retry_policy is None


@pytest.mark.spec("S003-07")
@pytest.mark.parametrize("version", [None, "", "   ", 1])
async def test_missing_or_blank_version_is_rejected(store: Any, version: Any) -> None:
    """The version is a required nonblank string, at open and at register."""
    bad = text_agent(version=version)
    with pytest.raises(nd.ConfigurationError, match="version"):
        await DurableRuntime.open(store=store, agents=[bad])
    async with await DurableRuntime.open(store=store) as rt:
        with pytest.raises(nd.ConfigurationError, match="version"):
            rt.register_agents([bad])
        assert rt.registry.ids() == []


@pytest.mark.spec("S003-08")
@pytest.mark.parametrize("policy", ["SAFE", "retry", "", None])
async def test_invalid_recovery_policy_is_rejected(store: Any, policy: Any) -> None:
    """tool_recovery values are 'safe', 'idempotent' or 'manual' only."""
    bad = tool_agent(tool_recovery={"work": policy})
    with pytest.raises(nd.ConfigurationError, match="recovery policy"):
        await DurableRuntime.open(store=store, agents=[bad])
    for good in ("safe", "idempotent", "manual"):
        assert tool_agent(tool_recovery={"work": good}).recovery_of("work") == good


@pytest.mark.spec("S003-08", "S003-18")
async def test_unlisted_tool_is_manual_and_registering_does_not_retry(
    store: Any, reopen: Any
) -> None:
    """An unlisted tool recovers as 'manual': interrupted mid-call, the run
    parks in needs_attention instead of running the tool again.
    Re-adding the missing registration after a restart does not retry it;
    only an explicit retry() runs the tool again."""
    calls: list[str] = []
    gate = asyncio.Event()
    agent = tool_agent(calls=calls, gate=gate)
    assert agent.recovery_of("work") == "manual"
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "go")
        await eventually(lambda: calls == ["x"])
    # The runtime closed mid-tool: the run is handed back, not failed.
    assert run.record().state == "pending"

    second = reopen(store)
    async with await DurableRuntime.open(store=second, agents=[agent]) as rt:
        run = await rt.get_run(run.run_id)
        await run.wait("needs_attention")
        assert calls == ["x"]  # the manual tool did not run again
        assert "manual" in (run.record().reason or "")

    clock = FakeClock()
    async with await DurableRuntime.open(store=second, deps=clock.deps()) as rt:
        run = await rt.get_run(run.run_id)
        assert [r.run_id for r in rt.list_runs(status="needs_attention")] == [run.run_id]
        rt.register_agents([agent])
        await rt.resume()
        await clock.skip(60_000)  # the engine looked again: nothing to run
        assert run.status == "needs_attention"
        assert calls == ["x"]
        gate.set()
        await run.retry()
        assert (await run.result()).text == "finished"
        assert calls == ["x", "x"]


@pytest.mark.spec("S003-09")
async def test_unknown_recovery_tool_is_rejected(store: Any) -> None:
    """Every tool named in tool_recovery must exist on the agent."""
    bad = tool_agent(tool_recovery={"work": "safe", "search": "safe"})
    with pytest.raises(nd.ConfigurationError, match="search"):
        await DurableRuntime.open(store=store, agents=[bad])
    async with await DurableRuntime.open(store=store) as rt:
        with pytest.raises(nd.ConfigurationError, match="search"):
            rt.register_agents([bad])


@pytest.mark.spec("S003-10")
async def test_validation_is_eager_at_open_and_register(store: Any) -> None:
    """Duplicate ids, unsupported options, unknown recovery tools, invalid
    policies and stream=True with a non-streaming model all raise at open() and
    register_agents(), before any run is submitted."""
    invalid: list[tuple[list[Agent], type[Exception], str]] = [
        ([text_agent(), text_agent()], nd.DurableConflictError, "twice"),
        ([Agent("a", object(), version="1")], nd.ConfigurationError, "not a Model"),
        ([text_agent(max_steps=0)], nd.ConfigurationError, "max_steps"),
        ([tool_agent(tool_recovery={"nope": "safe"})], nd.ConfigurationError, "nope"),
        ([text_agent(model_retry={"max_attempts": 0})], nd.ConfigurationError, "model_retry"),
        ([text_agent(model_retry={"retries": 2})], nd.ConfigurationError, "model_retry"),
        (
            [Agent("a", GenerateOnlyModel(["hi"]), version="1", stream=True)],
            nd.ConfigurationError,
            "stream",
        ),
        ([Agent(" ", nd.ScriptedModel(["hi"]), version="1")], nd.ConfigurationError, "id"),
    ]
    for agents, error, match in invalid:
        with pytest.raises(error, match=match):
            await DurableRuntime.open(store=store, agents=agents)
    async with await DurableRuntime.open(store=store) as rt:
        for agents, error, match in invalid:
            with pytest.raises(error, match=match):
                rt.register_agents(agents)
        assert rt.registry.ids() == []
    # A streaming model is fine with stream=True; a generate-only one without it.
    async with await DurableRuntime.open(
        store=store,
        agents=[
            text_agent("s", stream=True),
            Agent("g", GenerateOnlyModel(["plain"]), version="1"),
        ],
    ) as rt:
        assert (await (await rt.submit("g", "hi")).result()).text == "plain"


# -- registering and unregistering at runtime -------------------------------------------------


@pytest.mark.spec("S003-11")
async def test_register_agents_is_all_or_nothing(store: Any) -> None:
    """One invalid entry means no entry of the batch is added."""
    async with await DurableRuntime.open(store=store, agents=[text_agent("a")]) as rt:
        with pytest.raises(nd.ConfigurationError):
            rt.register_agents([text_agent("b"), tool_agent("c", tool_recovery={"x": "safe"})])
        assert rt.registry.ids() == ["a"]
        with pytest.raises(nd.ConfigurationError, match="no agent"):
            await rt.submit("b", "hi")
        with pytest.raises(nd.DurableConflictError):
            rt.register_agents([text_agent("b"), text_agent("c"), text_agent("b")])
        assert rt.registry.ids() == ["a"]
        rt.register_agents([text_agent("b"), text_agent("c")])
        assert rt.registry.ids() == ["a", "b", "c"]


@pytest.mark.spec("S003-12")
async def test_conflicting_registration_never_replaces_the_implementation(
    store: Any,
) -> None:
    """Ids repeated in a batch, or an (id, version) registered with another
    definition, are DurableConflictError; the registered implementation keeps running.
    (nbdurable keys registrations by (id, version): an identical re-registration, as
    when a notebook cell runs again, keeps the original; a new version is added.)"""
    original = text_agent("a", text="original", instructions="Be brief.")
    async with await DurableRuntime.open(store=store, agents=[original]) as rt:
        changed = text_agent("a", text="changed", instructions="Be verbose.")
        with pytest.raises(nd.DurableConflictError, match="new version"):
            rt.register_agents([changed])
        with pytest.raises(nd.DurableConflictError, match="twice"):
            rt.register_agents([text_agent("z"), text_agent("z")])
        assert rt.registry.get("a") is original
        assert (await (await rt.submit("a", "hi")).result()).text == "original"

        # Re-running the unchanged cell: same definition, the original stays registered.
        rt.register_agents([text_agent("a", text="original", instructions="Be brief.")])
        assert rt.registry.get("a") is original

        # A changed agent under a new version is added; version 1 is still there.
        v2 = text_agent("a", version="2", text="v2", instructions="Be verbose.")
        rt.register_agents([v2])
        assert rt.registry.get("a", "1") is original
        run = await rt.submit("a", "hi")
        assert (await run.result()).text == "v2"
        assert run.record().agent_version == "2"


@pytest.mark.spec("S003-13")
async def test_registering_does_not_change_running_work_or_limits(store: Any) -> None:
    """A registration added while a run executes leaves that run and the
    concurrency limits alone, and the new agent can be used at once. (The tasks
    and graphs part waits for issue 10.)"""
    calls: list[str] = []
    gate = asyncio.Event()
    agent = tool_agent("a", calls=calls, gate=gate)
    async with await DurableRuntime.open(store=store, agents=[agent], max_concurrent_runs=2) as rt:
        run = await rt.submit("a", "go")
        await eventually(lambda: calls == ["x"])
        rt.register_agents([text_agent("b", text="from b")])
        assert rt.max_concurrent_runs == 2
        assert run.status == "running"
        assert (await (await rt.submit("b", "hi")).result()).text == "from b"
        gate.set()
        assert (await run.result()).text == "finished"
        assert calls == ["x"]
        assert run.record().agent_version == "1"


@pytest.mark.spec("S003-14")
async def test_unregister_idle_agent(store: Any) -> None:
    """unregister_agent removes an idle registration: True if it existed,
    False if not; the agent cannot be submitted afterwards."""
    async with await DurableRuntime.open(store=store, agents=[text_agent("a")]) as rt:
        await (await rt.submit("a", "hi")).result()
        assert rt.unregister_agent("a") is True
        assert rt.unregister_agent("a") is False
        assert rt.unregister_agent("never") is False
        assert rt.registry.ids() == []
        with pytest.raises(nd.ConfigurationError):
            await rt.submit("a", "hi")


@pytest.mark.spec("S003-15")
async def test_unregister_refused_while_a_run_needs_the_agent(store: Any) -> None:
    """DurableConflictError while any run of the agent is pending, running,
    queued, waiting for approval, needs attention, in retry_wait or cancelling."""
    release = asyncio.Event()
    started: list[str] = []

    @nd.tool
    async def work(item: str) -> str:
        """Work until cancelled; settle only when released."""
        started.append(item)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()  # a callback that takes a while to settle
            raise
        return "never"

    @nd.tool(needs_approval=True)
    def drop(name: str) -> str:
        """Drop something."""
        return f"dropped {name}"

    def busy(rt: DurableRuntime, agent_id: str) -> None:
        with pytest.raises(nd.DurableConflictError, match=agent_id):
            rt.unregister_agent(agent_id)
        assert agent_id in rt.registry.ids()

    agents = [
        Agent(
            "worker", nd.ScriptedModel([nd.Turn.call("work", item="x"), "ok"]), [work], version="1"
        ),
        Agent(
            "approver",
            nd.ScriptedModel([nd.Turn.call("drop", name="t"), "ok"]),
            [drop],
            version="1",
        ),
        Agent(
            "client", nd.ScriptedModel([nd.Turn.call("ask")]), [nd.client_tool("ask")], version="1"
        ),
        Agent(
            "flaky",
            nd.ScriptedModel(["ok"], fail_on=[1]),
            version="1",
            model_retry=ModelRetry(initial_delay_ms=60_000, max_delay_ms=60_000),
        ),
    ]

    # pending: submitted while no scheduler runs
    idle = DurableRuntime(store=store, agents=agents)
    pending = await idle.submit("worker", "go", session_id="s")
    assert pending.status == "pending"
    busy(idle, "worker")
    await pending.cancel()

    async with await DurableRuntime.open(store=store, agents=agents) as rt:
        running = await rt.submit("worker", "go", session_id="w")
        await running.wait("running")
        await eventually(lambda: started == ["x"])
        busy(rt, "worker")
        queued = await rt.submit("worker", "next", session_id="w", enqueue=True)
        assert queued.status == "queued"

        approving = await rt.submit("approver", "drop t")
        await approving.wait("waiting_approval")
        busy(rt, "approver")

        attention = await rt.submit("client", "ask")
        await attention.wait("needs_attention")
        busy(rt, "client")

        waiting = await rt.submit("flaky", "hi")
        record = await waiting.wait("retry_wait")
        assert record.next_attempt_at is not None
        busy(rt, "flaky")

        await queued.cancel()
        assert queued.status == "cancelled"
        await running.cancel()
        assert running.status == "cancelling"
        await asyncio.sleep(0.1)
        assert running.status == "cancelling"
        busy(rt, "worker")
        release.set()
        await running.wait("cancelled")

        for run in (approving, attention, waiting):
            await run.cancel()
            assert run.status == "cancelled"
        for agent_id in ("worker", "approver", "client", "flaky"):
            assert rt.unregister_agent(agent_id) is True


@pytest.mark.spec("S003-16")
async def test_unregistering_keeps_history_results_and_dedup(store: Any) -> None:
    """After unregistering, the run's result, its event log and its request
    id deduplication are all still there."""
    agent = tool_agent("a")
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "go", request_id="req-1")
        result = await run.result()
        events = await nd.read_events(store, run.run_id)
        assert rt.unregister_agent("a") is True

        again = await rt.get_run(run.run_id)
        assert (await again.result()).text == result.text == "finished"
        assert [e.offset for e in await nd.read_events(store, run.run_id)] == [
            e.offset for e in events
        ]
        assert run.record().state == "completed"

        rt.register_agents([agent])
        repeat = await rt.submit("a", "go", request_id="req-1")
        assert repeat.run_id == run.run_id
        with pytest.raises(nd.DurableConflictError):
            await rt.submit("a", "something else", request_id="req-1")


@pytest.mark.spec("S003-17")
async def test_registrations_are_process_local_restore_then_resume(store: Any, reopen: Any) -> None:
    """Registrations are not persisted. After a restart, open without agents,
    find unfinished runs with list_runs(), restore their exact registrations (the
    version they recorded), then resume()."""
    calls: list[str] = []
    gate = asyncio.Event()
    v1 = tool_agent("a", "1", calls=calls, gate=gate, tool_recovery={"work": "safe"})
    async with await DurableRuntime.open(store=store, agents=[v1]) as rt:
        run = await rt.submit("a", "go")
        await eventually(lambda: calls == ["x"])

    second = reopen(store)
    clock = FakeClock()
    async with await DurableRuntime.open(store=second, deps=clock.deps()) as rt:
        assert rt.registry.ids() == []
        unfinished = rt.list_runs(status=["pending", "queued", "retry_wait", "running"])
        assert [(r.run_id, r.agent_id, r.agent_version) for r in unfinished] == [
            (run.run_id, "a", "1")
        ]
        await clock.skip(60_000)  # the engine looked again
        assert (await rt.get_run(run.run_id)).status == "pending"  # nobody can run it

        # Another version of the agent does not take the run: it resumes under v1.
        rt.register_agents([tool_agent("a", "2", calls=calls, gate=gate)])
        await rt.resume()
        await clock.skip(60_000)
        assert (await rt.get_run(run.run_id)).status == "pending"

        gate.set()
        rt.register_agents([v1])
        await rt.resume()
        handle = await rt.get_run(run.run_id)
        assert (await handle.result()).text == "finished"
        assert calls == ["x", "x"]  # 'safe': re-run once after the interruption


@pytest.mark.spec("S003-10")
async def test_s003_limits_object_is_validated_at_open(store: Any) -> None:
    """`limits` must be a Limits."""
    with pytest.raises(nd.ConfigurationError, match="Limits"):
        await DurableRuntime.open(store=store, limits={"max_operations": 3})
    async with await DurableRuntime.open(store=store, limits=Limits(max_operations=3)) as rt:
        assert rt.limits.max_operations == 3
