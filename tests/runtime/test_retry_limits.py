"""Model retry and limits."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime, Limits, ModelRetry, RunFailedError

from .conftest import FakeClock, GatedModel, eventually, states_of

FAST = ModelRetry(max_attempts=3, initial_delay_ms=10, max_delay_ms=20)


def flaky_agent(
    fail_on: Any, retry: ModelRetry | None = FAST, turns: list[Any] | None = None, **kwargs: Any
) -> tuple[Agent, nd.ScriptedModel]:
    model = nd.ScriptedModel(turns or ["ok"] * 10, mode="sequential", fail_on=fail_on)
    return Agent("a", model, version="1", model_retry=retry, **kwargs), model


def clocked(clock: FakeClock) -> nd.Deps:
    return clock.deps()


# -- model retry --------------------------------------------------------------------------------


@pytest.mark.spec("S003-49")
async def test_without_model_retry_a_model_error_fails_the_run(store: Any) -> None:
    """Retry is opt-in: without model_retry one model error fails the run
    (reason model_error), with a single model call and no retry_wait."""
    agent, model = flaky_agent(fail_on=[1], retry=None)
    clock = FakeClock()
    async with await DurableRuntime.open(store=store, agents=[agent], deps=clocked(clock)) as rt:
        run = await rt.submit("a", "hi")
        with pytest.raises(RunFailedError) as caught:
            await run.result()
        assert caught.value.reason == "model_error"
        assert "ModelError" in (caught.value.error or "")
        await clock.skip(3_600_000)  # an hour later the engine looked again: nothing to retry
        assert model.calls == 1
        assert "retry_wait" not in await states_of(store, run.run_id)


@pytest.mark.spec("S003-50", "S003-52")
@pytest.mark.parametrize("retryable", [True, False])
async def test_every_error_in_the_attempt_is_retried_alike(store: Any, retryable: bool) -> None:
    """Any error raised inside the model attempt is retried: permanent
    provider errors, capability errors, response validation errors.
    There is no transient-error classifier: retryable=False is retried
    exactly like retryable=True."""
    failures = {
        1: nd.ModelError("400 bad request", retryable=retryable),
        2: TypeError("the model cannot take images"),
        3: ValueError("the response does not validate"),
    }
    retry = ModelRetry(max_attempts=4, initial_delay_ms=10, max_delay_ms=10)
    agent, model = flaky_agent(fail_on=failures, retry=retry)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        assert (await run.result()).text == "ok"
    assert model.calls == 4
    states = await states_of(store, run.run_id)
    assert states.count("retry_wait") == 3
    assert states[-1] == "completed"


@pytest.mark.spec("S003-50")
async def test_a_failure_mid_stream_is_retried(store: Any) -> None:
    """An error raised after part of the response streamed is in the attempt
    too; the retry starts a new attempt and completes."""
    model = nd.ScriptedModel(
        [nd.Turn(text="half an ans", error=nd.ModelError("connection reset")), "a full answer"],
        mode="sequential",
    )
    agent = Agent("a", model, version="1", stream=True, model_retry=FAST)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        assert (await run.result()).text == "a full answer"
    events = await nd.read_events(store, run.run_id)
    attempts = [e.attempt_id for e in events if e.type == "model_attempt_started"]
    assert len(attempts) == 2 and len(set(attempts)) == 2
    assert any(e.type == "model_attempt_failed" for e in events)


@pytest.mark.spec("S003-51")
async def test_tool_failures_are_not_retried(store: Any) -> None:
    """A tool failure is an is_error result the model reacts to: the model
    is not called again by retry, the tool runs once, no retry_wait."""
    tool_calls: list[str] = []

    @nd.tool
    def explode(item: str) -> str:
        """Fail."""
        tool_calls.append(item)
        raise RuntimeError("tool broke")

    agent, model = flaky_agent(
        fail_on=[], turns=[nd.Turn.call("explode", item="x"), "the tool failed"]
    )
    agent = Agent("a", model, [explode], version="1", model_retry=FAST)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        result = await run.result()
    assert result.text == "the tool failed"
    assert tool_calls == ["x"]
    assert model.calls == 2
    assert "retry_wait" not in await states_of(store, run.run_id)
    tool_results = [p for m in result.messages for p in m.content if p.type == "tool_result"]
    assert tool_results[0].is_error


@pytest.mark.spec("S003-51")
async def test_checkpoint_and_quota_failures_are_not_retried(store: Any) -> None:
    """A checkpoint over max_payload_bytes and the max_operations quota fail
    the run (limit_exceeded) at once, even with model_retry; the model is not
    called again."""
    big, big_model = flaky_agent(fail_on=[], turns=["z" * 3000])
    many = Agent(
        "b",
        nd.ScriptedModel([nd.Turn.call("noop")] * 10, mode="sequential"),
        [nd.tool(lambda: "ok", name="noop", description="Nothing.")],
        version="1",
        model_retry=FAST,
    )
    limits = Limits(max_payload_bytes=2000, max_operations=3)
    clock = FakeClock()
    async with await DurableRuntime.open(
        store=store, agents=[big, many], limits=limits, deps=clocked(clock)
    ) as rt:
        for agent_id, model_calls in (("a", lambda: big_model.calls), ("b", None)):
            run = await rt.submit(agent_id, "hi")
            with pytest.raises(RunFailedError) as caught:
                await run.result()
            assert caught.value.reason == "limit_exceeded"
            await clock.skip(3_600_000)  # the engine looked again: nothing to retry
            assert "retry_wait" not in await states_of(store, run.run_id)
            if model_calls is not None:
                assert model_calls() == 1
        assert rt.list_runs(status="failed")[-1].operations == 3


@pytest.mark.spec("S003-51")
async def test_model_turn_budget_is_not_retried(store: Any) -> None:
    """Running out of steps (the model-turn budget) ends the run without
    model retry."""
    agent = Agent(
        "a",
        nd.ScriptedModel([nd.Turn.call("noop")] * 10, mode="sequential"),
        [nd.tool(lambda: "ok", name="noop", description="Nothing.")],
        version="1",
        model_retry=FAST,
        max_steps=2,
    )
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        await run.wait()
        assert agent.model.calls == 2
        assert "retry_wait" not in await states_of(store, run.run_id)


@pytest.mark.spec("S003-53")
async def test_first_request_counts_toward_max_attempts(store: Any) -> None:
    """max_attempts=3 means at most 3 model calls in all."""
    agent, model = flaky_agent(fail_on=range(1, 10))
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        with pytest.raises(RunFailedError) as caught:
            await run.result()
        await asyncio.sleep(0.1)
    assert model.calls == 3
    assert caught.value.reason == "model_retries_exhausted"
    assert (await states_of(store, run.run_id)).count("retry_wait") == 2


@pytest.mark.spec("S003-54")
async def test_attempt_count_is_persisted_before_the_attempt(store: Any, reopen: Any) -> None:
    """The record counts the attempt before the model is called, so a crash
    during the attempt uses it up: after a restart only one attempt of two is left."""
    gate = asyncio.Event()
    retry = ModelRetry(max_attempts=2, initial_delay_ms=10, max_delay_ms=10)
    blocked = GatedModel(["ok"], gate=gate)
    async with await DurableRuntime.open(
        store=store, agents=[Agent("a", blocked, version="1", model_retry=retry)]
    ) as rt:
        run = await rt.submit("a", "hi")
        await eventually(lambda: blocked.entered == 1)
        record = run.record()
        assert (record.state, record.model_attempts, record.operations) == ("running", 1, 1)
    # The runtime stopped mid-attempt: the attempt stays used.
    record = run.record()
    assert (record.state, record.model_attempts) == ("pending", 1)

    failing = GatedModel(["ok"], fail_on=[1, 2, 3])  # the same definition, failing here
    second = reopen(store)
    async with await DurableRuntime.open(
        store=second, agents=[Agent("a", failing, version="1", model_retry=retry)]
    ) as rt:
        run = await rt.get_run(run.run_id)
        with pytest.raises(RunFailedError) as caught:
            await run.result()
    assert caught.value.reason == "model_retries_exhausted"
    assert failing.calls == 1


@pytest.mark.spec("S003-55")
async def test_backoff_doubles_capped_without_jitter(store: Any) -> None:
    """The delays are initial_delay_ms, then doubled each retry, capped at
    max_delay_ms, exactly (no jitter): 10, 20, 25, 25 ms."""
    policy = ModelRetry(max_attempts=5, initial_delay_ms=10, max_delay_ms=25)
    assert [policy.delay_ms(n) for n in (1, 2, 3, 4)] == [10, 20, 25, 25]
    clock = FakeClock()
    agent, model = flaky_agent(fail_on=[1, 2, 3, 4], retry=policy)
    async with await DurableRuntime.open(store=store, agents=[agent], deps=clocked(clock)) as rt:
        run = await rt.submit("a", "hi")
        for attempt, delay in enumerate([10, 20, 25, 25], start=1):
            record = await run.wait("retry_wait")
            assert model.calls == attempt
            assert record.next_attempt_at == clock.now() + delay
            await clock.skip(delay - 1)  # the engine looked again: not due yet
            assert run.status == "retry_wait" and model.calls == attempt
            await clock.skip(1)
            await eventually(lambda a=attempt: model.calls == a + 1)
        assert (await run.result()).text == "ok"


@pytest.mark.spec("S003-56")
async def test_retry_wait_frees_the_slot_but_keeps_session_order(store: Any) -> None:
    """Between attempts the run is retry_wait with next_attempt_at (in the
    record and its run_state event); its slot goes to other sessions while its
    own session's queue stays behind it."""
    clock = FakeClock()
    agent, model = flaky_agent(fail_on=[1], retry=FAST)
    other = Agent("b", nd.ScriptedModel(["b done"] * 5, mode="sequential"), version="1")
    async with await DurableRuntime.open(
        store=store, agents=[agent, other], max_concurrent_runs=1, deps=clocked(clock)
    ) as rt:
        run = await rt.submit("a", "hi", session_id="s")
        record = await run.wait("retry_wait")
        assert record.next_attempt_at == clock.now() + 10
        events = await nd.read_events(store, run.run_id)
        last = [e for e in events if e.type == "run_state"][-1]
        assert last.payload == {
            "state": "retry_wait",
            "reason": None,
            "next_attempt_at": record.next_attempt_at,
        }
        behind = await rt.submit("b", "after", session_id="s", enqueue=True)
        elsewhere = await rt.submit("b", "elsewhere", session_id="t")
        assert (await elsewhere.result()).text == "b done"  # the slot was free
        await clock.skip(9)  # the engine looked again: not due yet
        assert (run.status, behind.status) == ("retry_wait", "queued")
        await clock.skip(1)
        assert (await run.result()).text == "ok"
        assert (await behind.result()).text == "b done"
    assert model.calls == 2


@pytest.mark.spec("S003-57")
async def test_retry_deadline_survives_restart(store: Any, reopen: Any) -> None:
    """A retry_wait run keeps its next_attempt_at across a restart and is
    not attempted before it."""
    clock = FakeClock()
    retry = ModelRetry(max_attempts=3, initial_delay_ms=5000, max_delay_ms=5000)
    agent, model = flaky_agent(fail_on=[1], retry=retry)
    async with await DurableRuntime.open(store=store, agents=[agent], deps=clocked(clock)) as rt:
        run = await rt.submit("a", "hi")
        due = (await run.wait("retry_wait")).next_attempt_at
    assert due == clock.now() + 5000
    assert run.record().state == "retry_wait"

    second = reopen(store)
    async with await DurableRuntime.open(store=second, agents=[agent], deps=clocked(clock)) as rt:
        run = await rt.get_run(run.run_id)
        assert run.record().next_attempt_at == due
        await clock.skip(4999)  # the engine looked again: not due yet
        assert run.status == "retry_wait" and model.calls == 1
        await clock.skip(1)
        assert (await run.result()).text == "ok"
        assert model.calls == 2


@pytest.mark.spec("S003-57")
async def test_saved_retry_policy_ignores_later_registrations(store: Any, reopen: Any) -> None:
    """The retry policy saved at submission governs the run, even when the
    agent is registered again (after a restart) with another policy."""
    saved = ModelRetry(max_attempts=2, initial_delay_ms=10, max_delay_ms=10)
    first, _ = flaky_agent(fail_on=range(1, 10), retry=saved)
    clock = FakeClock()
    async with await DurableRuntime.open(store=store, agents=[first], deps=clocked(clock)) as rt:
        run = await rt.submit("a", "hi")
        await run.wait("retry_wait")
    assert run.record().retry_policy == saved.model_dump()

    generous = ModelRetry(max_attempts=6, initial_delay_ms=10, max_delay_ms=10)
    later, later_model = flaky_agent(fail_on=range(1, 10), retry=generous)
    second = reopen(store)
    async with await DurableRuntime.open(store=second, agents=[later], deps=clocked(clock)) as rt:
        run = await rt.get_run(run.run_id)
        for _ in range(6):  # enough time for the later registration's 6 attempts
            await clock.skip(10)
        with pytest.raises(RunFailedError) as caught:
            await run.result()
    assert caught.value.reason == "model_retries_exhausted"
    assert later_model.calls == 1  # two attempts in all, as saved


@pytest.mark.spec("S003-58")
async def test_exhausted_retries_wait_for_an_explicit_retry(store: Any) -> None:
    """With max_attempts used up the run is failed (model_retries_exhausted)
    and stays so; run.retry() starts a fresh attempt budget."""
    agent, model = flaky_agent(fail_on=[1, 2, 3, 4])
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        with pytest.raises(RunFailedError) as caught:
            await run.result()
        assert caught.value.reason == "model_retries_exhausted"
        await asyncio.sleep(0.2)
        assert run.status == "failed" and model.calls == 3
        await run.retry()
        # Call 4 fails too: with a fresh budget that is a retry, not the end.
        assert (await run.result()).text == "ok"
        assert model.calls == 5
        assert run.record().model_attempts == 0
        states = await states_of(store, run.run_id)
        assert states[states.index("failed") :] == [
            "failed",
            "pending",
            "running",
            "retry_wait",
            "running",
            "completed",
        ]
        with pytest.raises(nd.ConfigurationError):
            await run.retry()  # a completed run does not retry


@pytest.mark.spec("S003-59")
async def test_retry_timers_do_not_keep_the_runtime_alive(store: Any) -> None:
    """A run waiting a minute in retry_wait does not hold up close(); it stays
    in retry_wait for the next host to pick up."""
    retry = ModelRetry(max_attempts=3, initial_delay_ms=60_000, max_delay_ms=60_000)
    agent, _ = flaky_agent(fail_on=[1], retry=retry)
    rt = await DurableRuntime.open(store=store, agents=[agent])
    run = await rt.submit("a", "hi")
    record = await run.wait("retry_wait")
    started = time.monotonic()
    await rt.close()
    assert time.monotonic() - started < 1.0
    assert run.record().state == "retry_wait"
    assert run.record().next_attempt_at == record.next_attempt_at


# -- limits -----------------------------------------------------------------------------------


@pytest.mark.spec("S003-60")
def test_default_limits() -> None:
    """The defaults of the four limits."""
    limits = Limits()
    assert limits.max_pending_runs == 10_000
    assert limits.max_pending_tasks == 10_000
    assert limits.max_payload_bytes == 1_048_576
    assert limits.max_operations == 10_000


@pytest.mark.spec("S003-60")
async def test_runtime_uses_default_limits(store: Any) -> None:
    """A runtime opened without limits has the defaults."""
    async with await DurableRuntime.open(store=store) as rt:
        assert rt.limits == Limits()


@pytest.mark.spec("S003-61")
@pytest.mark.parametrize(
    "field", ["max_pending_runs", "max_pending_tasks", "max_payload_bytes", "max_operations"]
)
@pytest.mark.parametrize("value", [0, -1, 1.5, 2.0, "10", True, None])
def test_limits_must_be_positive_integers(field: str, value: Any) -> None:
    """Zero, negative and non-integer values are rejected."""
    with pytest.raises(nd.ConfigurationError, match=field):
        Limits(**{field: value})
    assert getattr(Limits(**{field: 1}), field) == 1


@pytest.mark.spec("S003-61")
def test_unknown_limit_is_rejected() -> None:
    """A misspelt limit is not silently ignored."""
    with pytest.raises(nd.ConfigurationError):
        Limits(max_payload=5)


@pytest.mark.spec("S003-55")
@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"initial_delay_ms": -1},
        {"max_delay_ms": 1.5},
        {"initial_delay_ms": 100, "max_delay_ms": 50},
        {"max_attempts": True},
    ],
)
def test_model_retry_is_validated(options: dict[str, Any]) -> None:
    """The retry policy's numbers are positive integers, max >= initial;
    its defaults are 3 attempts, 1000 ms, 30000 ms."""
    with pytest.raises(nd.ConfigurationError, match="model_retry"):
        ModelRetry(**options)
    assert ModelRetry() == ModelRetry(max_attempts=3, initial_delay_ms=1000, max_delay_ms=30_000)


@pytest.mark.spec("S003-41")
async def test_max_payload_bytes_on_prompts_counts_utf8_json_bytes(store: Any) -> None:
    """A prompt's size is the UTF-8 bytes of its JSON: '"aaa"' is
    5 bytes, and 'é' counts 2."""
    agent, _ = flaky_agent(fail_on=[], retry=None)
    # Admission only (no scheduler): a checkpoint would not fit in 7 bytes.
    rt = DurableRuntime(store=store, agents=[agent], limits=Limits(max_payload_bytes=7))
    assert (await rt.submit("a", "aaaaa")).status == "pending"  # 7 bytes: at the limit
    with pytest.raises(nd.LimitExceededError) as caught:
        await rt.submit("a", "aaaaaa")
    assert (caught.value.limit, caught.value.value, caught.value.maximum) == (
        "max_payload_bytes",
        8,
        7,
    )
    assert (await rt.submit("a", "ééa")).status == "pending"  # 2 + 2 + 2 + 1 = 7
    with pytest.raises(nd.LimitExceededError):
        await rt.submit("a", "ééé")  # 2 + 6 = 8
    assert [r.prompt for r in rt.list_runs()] == ['"aaaaa"', '"ééa"']


@pytest.mark.spec("S003-60")
async def test_max_pending_runs_refuses_submissions(store: Any) -> None:
    """max_pending_runs unfinished runs make submit refuse more;
    finished runs do not count."""
    idle = DurableRuntime(
        store=store, agents=[flaky_agent([], None)[0]], limits=Limits(max_pending_runs=2)
    )
    first = await idle.submit("a", "1")
    await idle.submit("a", "2")
    with pytest.raises(nd.LimitExceededError) as caught:
        await idle.submit("a", "3")
    assert caught.value.limit == "max_pending_runs"
    await first.cancel()
    await idle.submit("a", "3")
    assert len(idle.list_runs()) == 3


async def test_max_operations_counts_across_legs_and_retry_continues(
    store: Any, reopen: Any
) -> None:
    """max_operations counts model calls plus tool calls of one run across legs: a run
    that used 1 before an approval and 2 after it fails (limit_exceeded) with a
    limit of 2; after the limit is raised, retry() continues it without running the
    tool again."""
    tool_calls: list[str] = []

    @nd.tool(needs_approval=True)
    def drop(name: str) -> str:
        """Drop a table."""
        tool_calls.append(name)
        return f"dropped {name}"

    def make() -> Agent:
        model = nd.ScriptedModel([nd.Turn.call("drop", name="t"), "dropped it"])
        return Agent("a", model, [drop], version="1")

    async with await DurableRuntime.open(
        store=store, agents=[make()], limits=Limits(max_operations=2)
    ) as rt:
        run = await rt.submit("a", "drop t")
        assert (await run.wait("waiting_approval")).operations == 1
        await run.approve()
        with pytest.raises(RunFailedError) as caught:
            await run.result()
        assert caught.value.reason == "limit_exceeded"
        assert "max_operations" in (caught.value.error or "")
        assert tool_calls == ["t"]
        assert run.record().operations == 2

    second = reopen(store)
    async with await DurableRuntime.open(
        store=second, agents=[make()], limits=Limits(max_operations=10)
    ) as rt:
        run = await rt.get_run(run.run_id)
        await run.retry()
        assert (await run.result()).text == "dropped it"
        assert tool_calls == ["t"]
        assert run.record().operations == 3


@pytest.mark.spec("S003-54")
async def test_a_later_step_s_attempt_is_counted_before_its_call(store: Any, reopen: Any) -> None:
    """After a tool step the next attempt is counted before its call too: a call
    that crashes the process again and again uses the budget up."""
    gate = asyncio.Event()
    retry = ModelRetry(max_attempts=2, initial_delay_ms=10, max_delay_ms=10)
    blocked = GatedModel([nd.Turn.call("noop"), "ok"], mode="sequential")

    def noop() -> str:
        blocked.gate = gate  # the next model call blocks: the process "crashes" in it
        return "ok"

    tool = nd.tool(noop, name="noop", description="Nothing.")
    async with await DurableRuntime.open(
        store=store, agents=[Agent("a", blocked, [tool], version="1", model_retry=retry)]
    ) as rt:
        run = await rt.submit("a", "hi")
        await eventually(lambda: blocked.entered == 2)
        record = run.record()
        assert (record.state, record.model_attempts, record.operations) == ("running", 1, 3)
    record = run.record()
    assert (record.state, record.model_attempts) == ("pending", 1)

    # The same definition (its fingerprint), failing here.
    failing = GatedModel([nd.Turn.call("noop"), "ok"], mode="sequential", fail_on=[1, 2, 3])
    second = reopen(store)
    async with await DurableRuntime.open(
        store=second, agents=[Agent("a", failing, [tool], version="1", model_retry=retry)]
    ) as rt:
        run = await rt.get_run(run.run_id)
        with pytest.raises(RunFailedError) as caught:
            await run.result()
    assert caught.value.reason == "model_retries_exhausted"
    assert failing.calls == 1


async def test_a_run_ending_at_max_steps_gives_an_unused_count_back(store: Any) -> None:
    """A run that stops at max_steps after a tool step counts the calls it made."""
    ran: list[int] = []
    tool = nd.tool(lambda: ran.append(1) or "ok", name="noop", description="Nothing.")
    model = nd.ScriptedModel([nd.Turn.call("noop")] * 10, mode="sequential")
    agent = Agent("a", model, [tool], version="1", model_retry=FAST, max_steps=2)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "hi")
        await run.wait()
    record = run.record()
    assert record.operations == model.calls + len(ran)
    assert record.model_attempts == 0
