"""The async driver: loop options, tool failures as results, ScriptedModel, stream_chat."""

from __future__ import annotations

import asyncio
import time

import pytest

import nbdurable as nd
from nbdurable.models import ModelRequest


@nd.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@nd.tool
def explode() -> str:
    """Always fails."""
    raise ValueError("disk full")


# --- tool failures never crash the run ---------------------------------------------


async def test_tool_exceptions_invalid_args_and_unknown_tools_are_is_error_results() -> None:
    model = nd.ScriptedModel(
        [
            nd.Turn(tool_calls=[("explode", {}), ("add", {"a": "one"}), ("nope", {"x": 1})]),
            lambda request: nd.Turn(text=f"saw {len(request.messages[-1].tool_results)} errors"),
        ]
    )
    result = await nd.generate_text(model=model, messages="go", tools=[add, explode])
    results = result.steps[0].tool_results
    assert [r.is_error for r in results] == [True, True, True]
    assert results[0].result == "ValueError: disk full"
    assert "Invalid arguments for tool 'add'" in results[1].result
    assert results[2].result.startswith("Unknown tool 'nope'")
    assert result.text == "saw 3 errors" and result.status == "completed"


# --- options ---------------------------------------------------------------------


async def test_max_steps_is_a_runaway_guard() -> None:
    model = nd.ScriptedModel([nd.Turn.call("add", a=1, b=i) for i in range(10)])
    result = await nd.generate_text(model=model, messages="go", tools=[add], max_steps=3)
    assert result.finish_reason == "max_steps" and len(result.steps) == 3
    assert model.calls == 3


async def test_stop_conditions_see_cumulative_usage() -> None:
    turn = nd.Turn.call("add", a=1, b=1)
    usage = nd.Usage(input_tokens=60, output_tokens=40, total_tokens=100, cost=0.25)
    model = nd.ScriptedModel([nd.Turn(tool_calls=turn.tool_calls, usage=usage)] * 10)
    by_tokens = await nd.generate_text(
        model=model, messages="go", tools=[add], stop_when=nd.total_tokens_exceed(250)
    )
    assert by_tokens.finish_reason == "stop_condition" and len(by_tokens.steps) == 3
    by_cost = await nd.generate_text(
        model=model, messages="go", tools=[add], stop_when=[nd.cost_exceeds(0.4)]
    )
    assert len(by_cost.steps) == 2 and by_cost.usage.cost == pytest.approx(0.5)
    by_count = await nd.generate_text(
        model=model, messages="go", tools=[add], stop_when=[nd.step_count_is(4)]
    )
    assert len(by_count.steps) == 4


async def test_prepare_step_overrides_one_step_only() -> None:
    other = nd.ScriptedModel(["from the other model"], mode="sequential", keep_requests=None)
    main = nd.ScriptedModel([nd.Turn.call("add", a=2, b=3), "unused"], keep_requests=None)
    seen: list[tuple[int, int]] = []

    async def prepare(ctx: nd.StepContext) -> nd.PrepareStepResult | None:
        seen.append((ctx.step_index, len(ctx.messages)))
        if ctx.step_index == 1:
            return nd.PrepareStepResult(model=other, tools=[], instructions="be brief")
        return None

    result = await nd.generate_text(model=main, messages="go", tools=[add], prepare_step=prepare)
    assert seen == [(0, 1), (1, 3)]
    assert result.text == "from the other model"
    assert other.requests[0].tools == () and other.requests[0].instructions == "be brief"
    assert main.requests[0].tools[0].name == "add"


async def test_parallel_batches_and_max_tool_concurrency() -> None:
    running = 0
    peak = 0

    @nd.tool
    async def slow(i: int) -> int:
        """Sleep a little."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return i

    batch = nd.Turn(tool_calls=[("slow", {"i": i}) for i in range(6)])
    for limit, expected_peak in ((None, 6), (2, 2), (1, 1)):
        peak = 0
        model = nd.ScriptedModel([batch, "done"])
        result = await nd.generate_text(
            model=model, messages="go", tools=[slow], max_tool_concurrency=limit
        )
        assert peak == expected_peak
        # results keep the order of the calls, whatever order they finished in
        assert [r.result for r in result.steps[0].tool_results] == list(range(6))


async def test_instructions_reach_every_model_call() -> None:
    model = nd.ScriptedModel([nd.Turn.call("add", a=1, b=1), "ok"], keep_requests=None)
    await nd.generate_text(model=model, messages="go", tools=[add], instructions="You are terse.")
    assert [r.instructions for r in model.requests] == ["You are terse.", "You are terse."]


async def test_invalid_options_are_configuration_errors() -> None:
    model = nd.ScriptedModel(["hi"])
    with pytest.raises(nd.ConfigurationError, match="max_steps"):
        await nd.generate_text(model=model, messages="go", max_steps=0)
    with pytest.raises(nd.ConfigurationError, match="max_tool_concurrency"):
        await nd.generate_text(model=model, messages="go", max_tool_concurrency=0)
    with pytest.raises(nd.ConfigurationError, match="empty"):
        await nd.generate_text(model=model, messages=[])
    with pytest.raises(nd.ConfigurationError, match="not a Model"):
        await nd.generate_text(model="gpt", messages="go")
    with pytest.raises(nd.ConfigurationError, match="DurableSession"):
        await nd.generate_text(model=model, messages="go", tools=[add], session="x")  # type: ignore[arg-type]


async def test_injected_deps_drive_ids_and_clock(deps: nd.Deps, clock: object) -> None:
    store = nd.InMemorySessionStore()
    model = nd.ScriptedModel([nd.Turn.call("add", a=1, b=1), "ok"])
    result = await nd.generate_text(
        model=model, messages="go", tools=[add], session=nd.DurableSession(store), deps=deps
    )
    assert result.run_id == "id1"
    assert [c.created_at for c in (store.load("id1", step_index=i) for i in (0, 1))] == [
        1_700_000_000_000,
        1_700_000_000_000,
    ]


# --- ScriptedModel -------------------------------------------------------------------


async def test_scripted_model_streams_token_by_token_with_delay() -> None:
    model = nd.ScriptedModel(["Hello there, general Kenobi."], stream_delay=0.01)
    request = ModelRequest(messages=(nd.user("hi"),))
    started = time.perf_counter()
    events = [e async for e in model.stream(request)]
    elapsed = time.perf_counter() - started
    deltas = [e.delta for e in events if e.type == "text_delta"]
    assert deltas == ["Hello ", "there, ", "general ", "Kenobi."]
    assert events[-1].type == "response" and events[-1].response.text == "".join(deltas)
    assert elapsed >= 0.035


async def test_scripted_model_fails_on_given_calls() -> None:
    model = nd.ScriptedModel(["a", "b"], mode="sequential", fail_on=[2])
    request = ModelRequest(messages=(nd.user("hi"),))
    assert (await model.generate(request)).text == "a"
    with pytest.raises(nd.ModelError, match="call 2"):
        await model.generate(request)
    assert (await model.generate(request)).text == "b"
    custom = nd.ScriptedModel(["a"], fail_on={1: TimeoutError("slow")})
    with pytest.raises(TimeoutError):
        await custom.generate(request)


async def test_scripted_model_picks_turns_from_history_and_reports_exhaustion() -> None:
    model = nd.ScriptedModel(["first", "second"])
    one = ModelRequest(messages=(nd.user("hi"),))
    two = ModelRequest(messages=(nd.user("hi"), nd.assistant("first"), nd.user("more")))
    assert (await model.generate(two)).text == "second"
    assert (await model.generate(one)).text == "first"  # the same turn for the same history
    three = ModelRequest(messages=(*two.messages, nd.assistant("second"), nd.user("again")))
    with pytest.raises(nd.ScriptExhaustedError):
        await model.generate(three)


async def test_scripted_model_usage_cost_and_stable_call_ids() -> None:
    model = nd.ScriptedModel([nd.Turn.call("add", a=1, b=2)], price_per_million=(1.0, 2.0))
    request = ModelRequest(messages=(nd.user("hi"),))
    first = await model.generate(request)
    again = await model.generate(request)
    assert first.tool_calls[0].tool_call_id == again.tool_calls[0].tool_call_id == "call_1_0"
    usage = first.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens > 0
    assert usage.cost == pytest.approx((usage.input_tokens + 2 * usage.output_tokens) / 1e6)


async def test_scripted_model_error_mid_stream_after_partial_text() -> None:
    model = nd.ScriptedModel([nd.Turn(text="partial answer", error=nd.ModelError("cut"))])
    stream = nd.stream_chat(model=model, messages="hi")
    parts = [p async for p in stream.full_stream]
    assert [p.type for p in parts] == ["step-start", "text-delta", "text-delta", "error"]
    with pytest.raises(nd.ModelError, match="cut"):
        await stream.text


# --- stream_chat ---------------------------------------------------------------------


async def test_stream_chat_awaitables_and_replayable_stream() -> None:
    model = nd.ScriptedModel([nd.Turn.call("add", "adding", a=2, b=2), "four"])
    stream = nd.stream_chat(model=model, messages="2+2?", tools=[add])
    assert stream.run_id is None  # tools but no session: not durable
    texts = [t async for t in stream.text_stream]
    assert texts == ["adding", "four"]
    assert await stream.text == "four"
    assert await stream.finish_reason == "stop"
    assert (await stream.usage).total_tokens > 0
    assert await stream.status == "completed"
    assert len(await stream.steps) == 2
    replay = [p.type async for p in stream.full_stream]
    assert replay[0] == "step-start" and replay[-1] == "finish"
    assert stream.done()


async def test_stream_chat_two_concurrent_consumers_see_the_same_parts() -> None:
    model = nd.ScriptedModel(["one two three four"], stream_delay=0.005)
    stream = nd.stream_chat(model=model, messages="count")

    async def collect() -> list[str]:
        return [p.type async for p in stream.full_stream]

    a, b = await asyncio.gather(collect(), collect())
    assert a == b and a.count("text-delta") == 4


async def test_stream_chat_model_failure_is_an_error_part_not_a_raise() -> None:
    model = nd.ScriptedModel(["x"], fail_on=[1])
    stream = nd.stream_chat(model=model, messages="hi")
    parts = [p async for p in stream.full_stream]
    assert parts[-1].type == "error" and parts[-1].error_type == "ModelError"
    with pytest.raises(nd.ModelError):
        await stream.result()


async def test_stream_chat_bad_options_arrive_on_the_stream() -> None:
    stream = nd.stream_chat(model=nd.ScriptedModel(["x"]), messages="hi", max_steps=-1)
    parts = [p async for p in stream.full_stream]
    assert parts[-1].type == "error" and parts[-1].error_type == "ConfigurationError"


def test_stream_chat_created_outside_a_loop_starts_on_first_use() -> None:
    stream = nd.stream_chat(model=nd.ScriptedModel(["late start"]), messages="hi")

    async def consume() -> str:
        return await stream.text

    assert asyncio.run(consume()) == "late start"


async def test_unawaited_failed_stream_does_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    stream = nd.stream_chat(model=nd.ScriptedModel(["x"], fail_on=[1]), messages="hi")
    while not stream.done():
        await asyncio.sleep(0.001)
    del stream
    import gc

    gc.collect()
    assert not [w for w in recwarn if "never retrieved" in str(w.message)]


class _CountingModel(nd.ScriptedModel):
    """A ScriptedModel that counts its calls (none may happen for a refused prompt)."""

    calls: int = 0

    async def generate(self, request: nd.ModelRequest) -> nd.ModelResponse:
        type(self).calls += 1
        return await super().generate(request)


BLANK_PROMPTS: list[object] = ["", "   \n\t", [""], nd.user(""), nd.user("  "), ["hi", "  "]]


@pytest.mark.parametrize("messages", BLANK_PROMPTS)
async def test_generate_text_refuses_a_blank_prompt_before_any_model_call(
    messages: object, store: nd.InMemorySessionStore
) -> None:
    """A blank prompt is a ConfigurationError, as runtime.submit says (no model call, no run)."""
    _CountingModel.calls = 0

    @nd.tool
    def noop() -> str:
        """Do nothing."""
        return "ok"

    with pytest.raises(nd.ConfigurationError, match="blank"):
        await nd.generate_text(
            model=_CountingModel(["answer"]),
            messages=messages,  # type: ignore[arg-type]
            tools=[noop],
            session=nd.DurableSession(store, run_id="r-blank"),
        )
    assert _CountingModel.calls == 0
    assert store.load("r-blank") is None


@pytest.mark.parametrize("messages", BLANK_PROMPTS)
async def test_stream_chat_reports_a_blank_prompt_on_the_stream_before_any_model_call(
    messages: object,
) -> None:
    """stream_chat never raises (the seed's rule for resuming a stream holds for every streaming call): a blank prompt
    is an error part and every awaitable raises ConfigurationError; the model is not called."""
    _CountingModel.calls = 0
    stream = nd.stream_chat(model=_CountingModel(["answer"]), messages=messages)  # type: ignore[arg-type]
    parts = [p async for p in stream.full_stream]
    assert [p.type for p in parts] == ["error"]
    assert parts[0].error_type == "ConfigurationError"
    with pytest.raises(nd.ConfigurationError, match="blank"):
        await stream.result()
    assert _CountingModel.calls == 0


async def test_a_history_with_an_empty_assistant_reply_still_runs() -> None:
    """Only the user's prompt must not be blank: an empty earlier reply is history."""
    result = await nd.generate_text(
        model=nd.ScriptedModel(["again"], mode="sequential"),
        messages=["hi", nd.assistant(""), "go on"],
    )
    assert result.text == "again"
