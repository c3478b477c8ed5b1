"""The recovery unit and resuming from a checkpoint."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.parts import ErrorPart, StepStartPart, TextDeltaPart, ToolResultStreamPart

PLACEHOLDER = "No result provided for this client tool."

# --- helpers --------------------------------------------------------------------------


class Crash(BaseException):
    """The process dying: not an Exception, so nothing inside nbdurable can swallow it."""


def usage(n: int, cost: float | None = None) -> nd.Usage:
    return nd.Usage(input_tokens=n, output_tokens=n, total_tokens=2 * n, cost=cost)


def make_deps() -> nd.Deps:
    counter = itertools.count(1)
    return nd.Deps(clock=FixedClock(), generate_id=lambda: f"id{next(counter)}")


class FixedClock:
    def now(self) -> int:
        return 1_700_000_000_000


def make_tools(log: list[str]) -> list[nd.Tool]:
    """A fresh set of tools (what a new process re-creates), logging each execution."""

    @nd.tool
    def lookup(key: str) -> str:
        """Look a key up."""
        log.append(f"lookup:{key}")
        return f"value of {key}"

    @nd.tool(needs_approval=True)
    def drop_table(name: str) -> str:
        """Drop a warehouse table."""
        log.append(f"drop:{name}")
        return f"dropped {name}"

    return [lookup, drop_table]


def three_step_model(**kwargs: Any) -> nd.ScriptedModel:
    """Steps 0 and 1 call ``lookup``; step 2 answers."""
    return nd.ScriptedModel(
        [
            nd.Turn(text="step zero", tool_calls=[("lookup", {"key": "a"})], usage=usage(1)),
            nd.Turn(text="step one", tool_calls=[("lookup", {"key": "b"})], usage=usage(2)),
            nd.Turn(text="all done", usage=usage(3)),
        ],
        **kwargs,
    )


def approval_model(cost: float | None = None, *, keep_requests: int | None = 0) -> nd.ScriptedModel:
    """Step 0 looks up, step 1 is gated (suspends), step 2 looks up again, step 3 answers."""
    return nd.ScriptedModel(
        [
            nd.Turn(tool_calls=[("lookup", {"key": "a"})], usage=usage(5, cost)),
            nd.Turn(tool_calls=[("drop_table", {"name": "stg"})], usage=usage(5, cost)),
            nd.Turn(tool_calls=[("lookup", {"key": "c"})], usage=usage(5, cost)),
            nd.Turn(text="finished", usage=usage(5, cost)),
        ],
        keep_requests=keep_requests,
    )


async def suspend(
    store: nd.SessionStore, run_id: str, log: list[str] | None = None, **kwargs: Any
) -> nd.GenerateTextResult:
    """Leg 1 of an approval run: suspends on ``drop_table`` at step 1."""
    result = await nd.generate_text(
        model=kwargs.pop("model", None) or approval_model(),
        messages="clean up",
        tools=make_tools([] if log is None else log),
        session=nd.DurableSession(store, run_id=run_id),
        **kwargs,
    )
    assert result.status == "suspended"
    return result


def verdict(
    request: nd.ToolApprovalRequest, approved: bool = True, reason: str | None = None
) -> nd.ToolApprovalResponse:
    return nd.ToolApprovalResponse(
        approval_id=request.approval_id, approved=approved, reason=reason
    )


async def drain(stream: nd.StreamChatResult) -> list[Any]:
    return [part async for part in stream.full_stream]


class DieAfterSaves:
    """Wraps a store; the process "dies" right after the n-th save has been persisted."""

    def __init__(self, inner: nd.InMemorySessionStore, n: int) -> None:
        self.inner = inner
        self.n = n
        self.saves = 0

    def save(self, checkpoint: nd.AgentCheckpoint) -> None:
        self.inner.save(checkpoint)
        self.saves += 1
        if self.saves == self.n:
            raise Crash("killed between steps")

    def load(self, run_id: str) -> nd.AgentCheckpoint | None:
        return self.inner.load(run_id)


def all_calls_answered(messages: tuple[nd.Message, ...]) -> bool:
    answered = {r.tool_call_id for m in messages for r in m.tool_results}
    return all(c.tool_call_id in answered for m in messages for c in m.tool_calls)


# --- recovery unit --------------------------------------------------------------------


@pytest.mark.spec("S000-22")
async def test_crash_between_steps_loses_nothing() -> None:
    """After a crash right after step 0's checkpoint, resume starts at step 1."""
    store = nd.InMemorySessionStore()
    log1: list[str] = []
    model1 = three_step_model()
    with pytest.raises(Crash):
        await nd.generate_text(
            model=model1,
            messages="go",
            tools=make_tools(log1),
            session=nd.DurableSession(DieAfterSaves(store, 1), run_id="run-22"),
        )
    assert log1 == ["lookup:a"] and model1.calls == 1
    boundary = store.load("run-22")
    assert (boundary.step_index, boundary.status) == (0, "running")

    # A new process: only the store survives; model and tools are new objects.
    log2: list[str] = []
    model2 = three_step_model(keep_requests=None)
    done = await nd.resume_from_checkpoint(store, "run-22", model=model2, tools=make_tools(log2))
    assert done.status == "completed" and done.text == "all done"
    assert log2 == ["lookup:b"]  # step 0's tool is not run again
    assert model2.calls == 2  # steps 1 and 2 only
    assert model2.requests[0].messages == boundary.messages  # step 1 sees all of step 0
    assert [s.step_index for s in done.steps] == [1, 2]
    assert done.messages[: len(boundary.messages)] == boundary.messages
    assert [h.step_index for h in store.history("run-22")] == [0, 1, 2]
    assert done.total_usage == usage(1) + usage(2) + usage(3)


@pytest.mark.spec("S000-23")
async def test_crash_mid_model_call_reruns_that_step() -> None:
    """A model call dying mid-step resumes from the last boundary, re-running the step."""
    store = nd.InMemorySessionStore()
    log1: list[str] = []
    with pytest.raises(RuntimeError, match="connection reset"):
        await nd.generate_text(
            model=three_step_model(fail_on={2: RuntimeError("connection reset")}),
            messages="go",
            tools=make_tools(log1),
            session=nd.DurableSession(store, run_id="run-23"),
        )
    assert [h.step_index for h in store.history("run-23")] == [0]
    boundary = store.load("run-23")

    log2: list[str] = []
    model2 = three_step_model(keep_requests=None)
    done = await nd.resume_from_checkpoint(store, "run-23", model=model2, tools=make_tools(log2))
    assert done.status == "completed"
    assert model2.requests[0].messages == boundary.messages  # step 1's model call again
    assert [s.step_index for s in done.steps] == [1, 2]
    assert log1 == ["lookup:a"] and log2 == ["lookup:b"]


@pytest.mark.spec("S000-23", "S003-28")
async def test_crash_mid_tool_reruns_the_whole_step_and_its_tools() -> None:
    """A crash inside a tool re-runs the step: its finished tools run twice."""
    store = nd.InMemorySessionStore()

    def tools(log: list[str], crash: bool) -> list[nd.Tool]:
        @nd.tool
        def explode() -> str:
            """A tool the process dies in."""
            log.append("explode")
            if crash:
                raise Crash("kernel died mid-tool")
            return "survived"

        return [*make_tools(log), explode]

    def model(keep_requests: int | None = 0) -> nd.ScriptedModel:
        return nd.ScriptedModel(
            [
                nd.Turn.call("lookup", key="a"),
                nd.Turn(tool_calls=[("lookup", {"key": "b"}), ("explode", {})]),
                "done",
            ],
            keep_requests=keep_requests,
        )

    log1: list[str] = []
    model1 = model()
    with pytest.raises(Crash):
        await nd.generate_text(
            model=model1,
            messages="go",
            tools=tools(log1, crash=True),
            max_tool_concurrency=1,
            session=nd.DurableSession(store, run_id="run-23t"),
        )
    assert log1 == ["lookup:a", "lookup:b", "explode"]
    assert model1.calls == 2
    assert [h.step_index for h in store.history("run-23t")] == [0]
    boundary = store.load("run-23t")

    log2: list[str] = []
    model2 = model(keep_requests=None)
    done = await nd.resume_from_checkpoint(
        store, "run-23t", model=model2, tools=tools(log2, crash=False), max_tool_concurrency=1
    )
    assert done.status == "completed" and done.text == "done"
    # The whole step re-ran from the boundary: both its tools, lookup:b for the second
    # time. The model's response to it was committed before the crash, so it is reused
    # rather than asked again; the first new request is the next step's.
    assert len(model2.requests) == 1
    assert model2.requests[0].messages[: len(boundary.messages)] == boundary.messages
    assert model2.requests[0].messages[len(boundary.messages)].tool_calls[1].tool_name == (
        "explode"
    )
    assert log2 == ["lookup:b", "explode"]
    assert [h.step_index for h in store.history("run-23t")] == [0, 1, 2]


@pytest.mark.spec("S000-24")
async def test_cancelled_generate_text_does_not_checkpoint_the_interrupted_step() -> None:
    """Cancelling the call mid-tool leaves the last checkpoint at the prior boundary."""
    started = asyncio.Event()
    never = asyncio.Event()

    @nd.tool
    async def lookup(key: str) -> str:
        """A lookup that hangs on its second call."""
        if key == "b":
            started.set()
            await never.wait()
        return key

    store = nd.InMemorySessionStore()
    task = asyncio.create_task(
        nd.generate_text(
            model=three_step_model(),
            messages="go",
            tools=[lookup],
            session=nd.DurableSession(store, run_id="run-24"),
        )
    )
    await asyncio.wait_for(started.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.01)
    history = store.history("run-24")
    assert [(h.step_index, h.status) for h in history] == [(0, "running")]
    assert "step one" not in nd.serialize_checkpoint(store.load("run-24"))

    # The interrupted step runs again on resume.
    log: list[str] = []
    done = await nd.resume_from_checkpoint(
        store, "run-24", model=three_step_model(), tools=make_tools(log)
    )
    assert done.status == "completed" and log == ["lookup:b"]
    assert [s.step_index for s in done.steps] == [1, 2]


@pytest.mark.spec("S000-24")
async def test_stream_cancel_mid_model_stream_does_not_checkpoint_the_step() -> None:
    """``stream.cancel()`` during a streamed model call saves nothing for that step."""
    slow = nd.ScriptedModel(
        [
            nd.Turn.call("lookup", "zero", key="a"),
            nd.Turn(
                text="one two three four five six seven eight nine ten eleven twelve",
                tool_calls=[("lookup", {"key": "b"})],
            ),
            "done",
        ],
        stream_delay=0.01,
    )
    store = nd.InMemorySessionStore()
    stream = nd.stream_chat(
        model=slow,
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-24s"),
    )
    parts = []
    async for part in stream.full_stream:
        parts.append(part)
        if isinstance(part, TextDeltaPart) and part.step_index == 1:
            stream.cancel()
    assert isinstance(parts[-1], ErrorPart) and parts[-1].error_type == "CancelledError"
    with pytest.raises(asyncio.CancelledError):
        await stream.result()
    assert stream.done()
    await asyncio.sleep(0.05)
    assert [(h.step_index, h.status) for h in store.history("run-24s")] == [(0, "running")]
    assert "eleven" not in nd.serialize_checkpoint(store.load("run-24s"))


# --- resuming -------------------------------------------------------------------------


@pytest.mark.spec("S000-25")
async def test_resume_awaits_a_result_and_the_stream_twin_returns_at_once() -> None:
    """Both resume functions have the same semantics; the stream one returns at once."""
    store_a, store_b = nd.InMemorySessionStore(), nd.InMemorySessionStore()
    log_a: list[str] = []
    log_b: list[str] = []
    first_a = await suspend(store_a, "run-a", deps=make_deps())
    first_b = await suspend(store_b, "run-b", deps=make_deps())
    assert first_a.pending_approvals == first_b.pending_approvals

    pending = nd.resume_from_checkpoint(
        store_a,
        "run-a",
        model=approval_model(),
        tools=make_tools(log_a),
        approval_responses=[verdict(first_a.pending_approvals[0])],
        deps=make_deps(),
    )
    assert inspect.iscoroutine(pending)
    buffered = await pending
    assert isinstance(buffered, nd.GenerateTextResult)

    stream = nd.resume_stream_from_checkpoint(
        store_b,
        "run-b",
        model=approval_model(),
        tools=make_tools(log_b),
        approval_responses=[verdict(first_b.pending_approvals[0])],
        deps=make_deps(),
    )
    assert isinstance(stream, nd.StreamChatResult)
    assert stream.run_id == "run-b"
    streamed = await stream.result()

    assert log_a == log_b == ["drop:stg", "lookup:c"]
    for field in ("text", "status", "finish_reason", "messages", "usage", "total_usage"):
        assert getattr(buffered, field) == getattr(streamed, field), field
    assert buffered.step_index == streamed.step_index == 3
    assert [s.step_index for s in buffered.steps] == [s.step_index for s in streamed.steps]
    assert [(h.step_index, h.status) for h in store_a.history("run-a")] == [
        (h.step_index, h.status) for h in store_b.history("run-b")
    ]


@pytest.mark.spec("S000-26")
def test_resume_options_are_a_normal_calls_minus_messages_and_session() -> None:
    """Resume takes every call option except messages and session; model required."""
    pairs = [
        (nd.generate_text, nd.resume_from_checkpoint),
        (nd.stream_chat, nd.resume_stream_from_checkpoint),
    ]
    for call, resume in pairs:
        call_params = inspect.signature(call).parameters
        resume_params = inspect.signature(resume).parameters
        assert set(resume_params) == (set(call_params) - {"messages", "session"}) | {
            "store",
            "run_id",
        }
        assert resume_params["model"].default is inspect.Parameter.empty
        for name in set(call_params) - {"messages", "session"}:
            assert resume_params[name].default == call_params[name].default, name

    store = nd.InMemorySessionStore()
    with pytest.raises(TypeError):
        nd.resume_from_checkpoint(store, "r", model=approval_model(), messages=["hi"])  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        nd.resume_stream_from_checkpoint(
            store,
            "r",
            model=approval_model(),
            session=nd.DurableSession(store),  # type: ignore[call-arg]
        )


@pytest.mark.spec("S000-26")
async def test_model_tools_and_options_come_from_the_resume_call() -> None:
    """Checkpoints hold data, not closures: the resume call's model/tools/options run."""
    store = nd.InMemorySessionStore()
    log1: list[str] = []
    first = await suspend(store, "run-26", log1)
    request = first.pending_approvals[0]

    # Without tools re-supplied, nothing from leg 1 can run: the approved call is unknown.
    bare = nd.InMemorySessionStore()
    bare.save(store.load("run-26"))
    no_tools = await nd.resume_from_checkpoint(
        bare,
        "run-26",
        model=nd.ScriptedModel([nd.Turn(), nd.Turn(), "gave up"]),
        approval_responses=[verdict(request)],
    )
    results = no_tools.messages[4].tool_results
    assert results[0].is_error and "Unknown tool" in results[0].result
    assert log1 == ["lookup:a"]

    # With new tool objects and options, those are what the resumed leg uses.
    log2: list[str] = []
    model2 = approval_model(keep_requests=None)
    done = await nd.resume_from_checkpoint(
        store,
        "run-26",
        model=model2,
        tools=make_tools(log2),
        instructions="Be brief.",
        max_steps=3,
        approval_responses=[verdict(request)],
    )
    assert log1 == ["lookup:a"] and log2 == ["drop:stg", "lookup:c"]
    assert model2.requests[0].instructions == "Be brief."
    # max_steps=3 counts the whole run's steps: only step 2 runs in this leg.
    assert model2.calls == 1
    assert done.finish_reason == "max_steps" and done.step_index == 2


@pytest.mark.spec("S000-27")
async def test_approved_calls_run_and_denied_ones_get_is_error_with_the_reason() -> None:
    """Approved -> the tool runs; denied -> is_error carrying the reason."""
    cases = [
        (True, None, False, "dropped stg"),
        (False, "Not on a Friday.", True, "Not on a Friday."),
        (False, None, True, "Denied by user."),
    ]
    for approved, reason, is_error, expected in cases:
        store = nd.InMemorySessionStore()
        log: list[str] = []
        first = await suspend(store, "run-27")
        model = approval_model(keep_requests=None)
        done = await nd.resume_from_checkpoint(
            store,
            "run-27",
            model=model,
            tools=make_tools(log),
            approval_responses=[verdict(first.pending_approvals[0], approved, reason)],
        )
        assert done.status == "completed"
        (result,) = done.messages[4].tool_results
        assert result.tool_call_id == first.pending_approvals[0].tool_call_id
        assert (result.is_error, result.result) == (is_error, expected)
        assert log == (["drop:stg", "lookup:c"] if approved else ["lookup:c"])
        assert model.requests[0].messages[-1].tool_results == (result,)  # the model saw it


@pytest.mark.spec("S000-28")
async def test_unanswered_pending_call_is_denied_and_never_resent() -> None:
    """No verdict -> denied by default; the run goes on; no dangling tool_use."""
    store = nd.InMemorySessionStore()
    first = await suspend(store, "run-28")
    log: list[str] = []
    model = approval_model(keep_requests=None)
    done = await nd.resume_from_checkpoint(store, "run-28", model=model, tools=make_tools(log))
    assert done.status == "completed" and done.text == "finished"
    assert "drop:stg" not in log
    (result,) = done.messages[4].tool_results
    assert result.tool_call_id == first.pending_approvals[0].tool_call_id
    assert result.is_error and "denied" in result.result.lower()
    assert model.calls == 2
    for request in model.requests:
        assert all_calls_answered(request.messages)
        assert request.messages[-1].role == "tool"

    # A verdict for some other approval id does not count as an answer either.
    store2 = nd.InMemorySessionStore()
    await suspend(store2, "run-28b")
    log2: list[str] = []
    other = nd.ToolApprovalResponse(approval_id="approval_not_pending", approved=True)
    done2 = await nd.resume_from_checkpoint(
        store2,
        "run-28b",
        model=approval_model(),
        tools=make_tools(log2),
        approval_responses=[other],
    )
    assert "drop:stg" not in log2
    assert done2.messages[4].tool_results[0].is_error


@pytest.mark.spec("S000-29")
async def test_resumed_leg_continues_step_index_and_cumulative_usage() -> None:
    """The new leg's steps and checkpoint usage carry on from the checkpoint."""
    store = nd.InMemorySessionStore()
    await suspend(store, "run-29")
    suspended = store.load("run-29")
    assert (suspended.step_index, suspended.usage) == (1, usage(5) + usage(5))
    done = await nd.resume_from_checkpoint(
        store, "run-29", model=approval_model(), tools=make_tools([]), approval_responses=[]
    )
    assert [s.step_index for s in done.steps] == [2, 3]
    history = store.history("run-29")
    assert [h.step_index for h in history] == [0, 1, 2, 3]
    assert history[2].usage == suspended.usage + usage(5)
    assert history[3].usage == suspended.usage + usage(5) + usage(5)
    assert done.total_usage == history[3].usage


@pytest.mark.spec("S000-30")
@pytest.mark.parametrize("kind", ["total_tokens_exceed", "cost_exceeds"])
async def test_budget_stops_see_the_whole_runs_usage(kind: str) -> None:
    """A budget stop counts leg 1's usage too: it fires after one step of leg 2."""
    store = nd.InMemorySessionStore()
    first = await suspend(store, "run-30", model=approval_model(cost=0.01))
    assert first.total_usage.total_tokens == 20  # under the budget on leg 1
    # Leg 2's own usage after one step is 10 tokens / $0.01: under budget on its own.
    condition = (
        nd.total_tokens_exceed(25) if kind == "total_tokens_exceed" else nd.cost_exceeds(0.025)
    )
    model = approval_model(cost=0.01)
    done = await nd.resume_from_checkpoint(
        store,
        "run-30",
        model=model,
        tools=make_tools([]),
        stop_when=condition,
        approval_responses=[verdict(first.pending_approvals[0])],
    )
    assert done.finish_reason == "stop_condition"
    assert model.calls == 1
    assert done.step_index == 2
    assert store.load("run-30").status == "completed"
    assert done.usage.total_tokens == 10  # what fired the stop was the cumulative 30

    # Control: a budget only the whole run's usage would not exceed lets it go on.
    store2 = nd.InMemorySessionStore()
    first2 = await suspend(store2, "run-30b", model=approval_model(cost=0.01))
    loose = nd.total_tokens_exceed(35) if kind == "total_tokens_exceed" else nd.cost_exceeds(0.035)
    model2 = approval_model(cost=0.01)
    done2 = await nd.resume_from_checkpoint(
        store2,
        "run-30b",
        model=model2,
        tools=make_tools([]),
        stop_when=loose,
        approval_responses=[verdict(first2.pending_approvals[0])],
    )
    assert model2.calls == 2 and done2.finish_reason == "stop"


@pytest.mark.spec("S000-30")
async def test_prepare_step_sees_the_whole_runs_usage() -> None:
    """prepare_step's ``usage`` is the run's cumulative usage, all legs included."""
    store = nd.InMemorySessionStore()
    seen: list[tuple[int, int, int]] = []

    def prepare(ctx: nd.StepContext) -> None:
        seen.append((ctx.step_index, ctx.usage.total_tokens, ctx.leg_usage.total_tokens))

    first = await suspend(store, "run-30p", prepare_step=prepare)
    assert seen == [(0, 0, 0), (1, 10, 10)]
    seen.clear()
    await nd.resume_from_checkpoint(
        store,
        "run-30p",
        model=approval_model(),
        tools=make_tools([]),
        prepare_step=prepare,
        approval_responses=[verdict(first.pending_approvals[0])],
    )
    assert seen == [(2, 20, 0), (3, 30, 10)]


@pytest.mark.spec("S000-31")
async def test_each_legs_result_reports_its_own_usage() -> None:
    """``usage`` on a leg's result is that leg's cost; ``total_usage`` the run's."""
    store = nd.InMemorySessionStore()
    first = await suspend(store, "run-31")
    assert first.usage == usage(5) + usage(5)
    done = await nd.resume_from_checkpoint(
        store,
        "run-31",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[verdict(first.pending_approvals[0])],
    )
    assert done.usage == usage(5) + usage(5)
    assert done.total_usage == first.usage + done.usage
    assert store.load("run-31").usage == done.total_usage

    # The streaming twin reports the same split.
    store2 = nd.InMemorySessionStore()
    first2 = await suspend(store2, "run-31s")
    stream = nd.resume_stream_from_checkpoint(
        store2,
        "run-31s",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[verdict(first2.pending_approvals[0])],
    )
    parts = await drain(stream)
    assert await stream.usage == usage(5) + usage(5)
    assert await stream.total_usage == first2.usage + usage(5) + usage(5)
    assert parts[-1].type == "finish" and parts[-1].usage == await stream.usage


@pytest.mark.spec("S000-32")
async def test_resume_of_an_unknown_run_raises_checkpoint_not_found() -> None:
    """``resume_from_checkpoint`` of an unknown run id raises CheckpointNotFoundError."""
    store = nd.InMemorySessionStore()
    await suspend(store, "known")
    model = approval_model()
    with pytest.raises(nd.CheckpointNotFoundError) as info:
        await nd.resume_from_checkpoint(store, "unknown", model=model, tools=make_tools([]))
    assert info.value.run_id == "unknown"
    assert isinstance(info.value, nd.NbdurableError)
    assert model.calls == 0
    assert store.list() == ["known"]


@pytest.mark.spec("S000-33")
async def test_stream_resume_of_an_unknown_run_emits_an_error_part() -> None:
    """The streaming twin never raises on the call; error part + rejecting awaitables."""
    store = nd.InMemorySessionStore()
    model = approval_model()
    stream = nd.resume_stream_from_checkpoint(store, "ghost", model=model, tools=make_tools([]))
    assert isinstance(stream, nd.StreamChatResult)
    parts = await drain(stream)
    assert len(parts) == 1
    assert isinstance(parts[0], ErrorPart)
    assert parts[0].error_type == "CheckpointNotFoundError"
    assert "ghost" in parts[0].message
    with pytest.raises(nd.CheckpointNotFoundError):
        await stream.usage
    with pytest.raises(nd.CheckpointNotFoundError):
        await stream.finish_reason
    with pytest.raises(nd.CheckpointNotFoundError):
        await stream.result()
    assert model.calls == 0


@pytest.mark.spec("S000-33")
def test_stream_resume_of_an_unknown_run_never_raises_even_outside_a_loop() -> None:
    """Called with no running event loop, the call still returns instead of raising."""
    store = nd.InMemorySessionStore()
    stream = nd.resume_stream_from_checkpoint(store, "ghost", model=approval_model())
    assert isinstance(stream, nd.StreamChatResult)

    async def consume() -> tuple[list[Any], BaseException | None]:
        parts = await drain(stream)
        try:
            await stream.finish_reason
        except nd.CheckpointNotFoundError as exc:
            return parts, exc
        return parts, None

    parts, error = asyncio.run(consume())
    assert [p.type for p in parts] == ["error"]
    assert isinstance(error, nd.CheckpointNotFoundError)


@pytest.mark.spec("S000-34")
@pytest.mark.parametrize("streaming", [False, True])
async def test_pending_client_tool_gets_the_placeholder_on_resume(streaming: bool) -> None:
    """Resuming feeds a pending client tool the is_error placeholder; the model goes on."""
    pick = nd.client_tool("pick_file", "Ask the user to pick a file.")

    def model(keep_requests: int | None = 0) -> nd.ScriptedModel:
        return nd.ScriptedModel(
            [nd.Turn.call("pick_file"), "I could not get the file."], keep_requests=keep_requests
        )

    store = nd.InMemorySessionStore()
    first = await nd.generate_text(
        model=model(), messages="go", tools=[pick], session=nd.DurableSession(store, "run-34")
    )
    assert first.status == "suspended"
    call = first.pending_tool_calls[0]
    model2 = model(keep_requests=None)
    if streaming:
        stream = nd.resume_stream_from_checkpoint(store, "run-34", model=model2, tools=[pick])
        await drain(stream)
        done = await stream.result()
    else:
        done = await nd.resume_from_checkpoint(store, "run-34", model=model2, tools=[pick])
    assert done.status == "completed" and done.text == "I could not get the file."
    (result,) = done.messages[2].tool_results
    assert result.tool_call_id == call.tool_call_id
    assert result.is_error and result.result == PLACEHOLDER
    assert model2.requests[0].messages[-1].tool_results == (result,)


@pytest.mark.spec("S000-35")
@pytest.mark.parametrize("streaming", [False, True])
async def test_escape_hatch_appends_the_real_result_and_continues_durably(
    streaming: bool,
) -> None:
    """Load, append the real tool_result, call again with the same session."""
    pick = nd.client_tool("pick_file", "Ask the user to pick a file.")

    def model(keep_requests: int | None = 0) -> nd.ScriptedModel:
        return nd.ScriptedModel(
            [
                nd.Turn(tool_calls=[("pick_file", {})], usage=usage(2)),
                nd.Turn(tool_calls=[("lookup", {"key": "sales.csv"})], usage=usage(3)),
                nd.Turn(text="Loaded sales.csv.", usage=usage(4)),
            ],
            keep_requests=keep_requests,
        )

    store = nd.InMemorySessionStore()
    first = await nd.generate_text(
        model=model(),
        messages="go",
        tools=[pick, *make_tools([])],
        session=nd.DurableSession(store, "run-35"),
    )
    assert first.status == "suspended"

    # ...a restart later: the client's real answer arrives.
    checkpoint = store.load("run-35")
    call = checkpoint.messages[-1].tool_calls[0]
    answer = nd.tool_message(
        [
            nd.ToolResultPart(
                tool_call_id=call.tool_call_id, tool_name="pick_file", result="/data/sales.csv"
            )
        ]
    )
    history = (*checkpoint.messages, answer)
    model2 = model(keep_requests=None)
    log: list[str] = []
    session = nd.DurableSession(store, run_id="run-35")
    tools = [pick, *make_tools(log)]
    if streaming:
        stream = nd.stream_chat(model=model2, messages=history, tools=tools, session=session)
        assert stream.run_id == "run-35"
        await drain(stream)
        done = await stream.result()
    else:
        done = await nd.generate_text(model=model2, messages=history, tools=tools, session=session)
    assert done.status == "completed" and done.text == "Loaded sales.csv."
    assert done.run_id == "run-35"
    sent = model2.requests[0].messages[-1].tool_results[0]
    assert sent.result == "/data/sales.csv" and not sent.is_error
    assert PLACEHOLDER not in nd.serialize_checkpoint(store.load("run-35"))
    assert log == ["lookup:sales.csv"]
    history_infos = store.history("run-35")
    assert [h.step_index for h in history_infos] == [0, 1, 2]
    assert [h.status for h in history_infos] == ["suspended", "running", "completed"]
    assert store.load("run-35").usage == usage(2) + usage(3) + usage(4)
    assert done.usage == usage(3) + usage(4)


@pytest.mark.spec("S000-36")
async def test_approved_gated_server_tool_runs_its_real_execute() -> None:
    """An approved ``needs_approval`` tool with ``execute`` runs for real on resume."""
    store = nd.InMemorySessionStore()
    first = await suspend(store, "run-36")
    log: list[str] = []
    done = await nd.resume_from_checkpoint(
        store,
        "run-36",
        model=approval_model(),
        tools=make_tools(log),
        approval_responses=[verdict(first.pending_approvals[0])],
    )
    (result,) = done.messages[4].tool_results
    assert (result.result, result.is_error) == ("dropped stg", False)
    assert log.count("drop:stg") == 1
    assert PLACEHOLDER not in nd.serialize_checkpoint(store.load("run-36"))


def coder_setup(log: list[str]) -> tuple[nd.ScriptedModel, list[nd.Tool]]:
    """A parent whose one step calls a ``coder`` sub-agent (gated tool inside) and a sibling."""

    @nd.tool(needs_approval=True)
    def run_shell(cmd: str) -> str:
        """Run a shell command."""
        log.append(f"shell:{cmd}")
        return "tests pass"

    @nd.tool
    def sibling(name: str) -> str:
        """An ordinary tool in the same batch."""
        log.append(f"sibling:{name}")
        return f"sibling {name} run #{log.count(f'sibling:{name}')}"

    coder = nd.agent_tool(
        "coder",
        model=nd.ScriptedModel([nd.Turn.call("run_shell", cmd="pytest"), "fixed"]),
        tools=[run_shell],
    )
    return coder, [coder, sibling]  # type: ignore[return-value]


def parent_model(order: list[tuple[str, dict[str, Any]]]) -> nd.ScriptedModel:
    return nd.ScriptedModel([nd.Turn(tool_calls=order), "all done"])


@pytest.mark.spec("S000-37")
async def test_sub_agent_suspending_in_a_parallel_batch_discards_siblings() -> None:
    """No tool message for the suspended step; siblings re-run on resume."""
    order = [
        ("sibling", {"name": "before"}),
        ("coder", {"prompt": "fix"}),
        ("sibling", {"name": "after"}),
    ]
    store = nd.InMemorySessionStore()
    log1: list[str] = []
    _, tools1 = coder_setup(log1)
    stream = nd.stream_chat(
        model=parent_model(order),
        messages="go",
        tools=tools1,
        session=nd.DurableSession(store, "run-37"),
    )
    parts = await drain(stream)
    first = await stream.result()
    assert first.status == "suspended"
    assert sorted(log1) == ["sibling:after", "sibling:before"]  # both ran in parallel
    assert not any(isinstance(p, ToolResultStreamPart) for p in parts)
    checkpoint = store.load("run-37")
    assert checkpoint.status == "suspended"
    assert [m.role for m in checkpoint.messages] == ["user", "assistant"]  # no tool message
    (request,) = first.pending_approvals
    assert request.agent_path == ("coder",)

    log2: list[str] = []
    _, tools2 = coder_setup(log2)
    done = await nd.resume_from_checkpoint(
        store,
        "run-37",
        model=parent_model(order),
        tools=tools2,
        approval_responses=[verdict(request)],
    )
    assert done.status == "completed" and done.text == "all done"
    assert sorted(log2) == ["shell:pytest", "sibling:after", "sibling:before"]  # re-run
    results = {r.tool_call_id: r.result for r in done.messages[2].tool_results}
    assert list(results.values()) == ["sibling before run #1", "fixed", "sibling after run #1"]
    # The sibling results of leg 1 were discarded: nothing of theirs was ever stored.
    for info in store.history("run-37"):
        snapshot = store.load("run-37", step_index=info.step_index)
        if info.status == "suspended":
            assert all(m.role != "tool" for m in snapshot.messages)


@pytest.mark.spec("S000-37")
async def test_sequential_batch_does_not_start_calls_after_the_suspending_one() -> None:
    """With max_tool_concurrency=1 the batch runs in order; later calls wait."""
    order = [
        ("sibling", {"name": "before"}),
        ("coder", {"prompt": "fix"}),
        ("sibling", {"name": "after"}),
    ]
    store = nd.InMemorySessionStore()
    log1: list[str] = []
    _, tools1 = coder_setup(log1)
    first = await nd.generate_text(
        model=parent_model(order),
        messages="go",
        tools=tools1,
        max_tool_concurrency=1,
        session=nd.DurableSession(store, "run-37s"),
    )
    assert first.status == "suspended"
    assert log1 == ["sibling:before"]  # "after" was never started
    assert [m.role for m in store.load("run-37s").messages] == ["user", "assistant"]

    log2: list[str] = []
    _, tools2 = coder_setup(log2)
    done = await nd.resume_from_checkpoint(
        store,
        "run-37s",
        model=parent_model(order),
        tools=tools2,
        max_tool_concurrency=1,
        approval_responses=[verdict(first.pending_approvals[0])],
    )
    assert done.status == "completed"
    assert log2 == ["sibling:before", "shell:pytest", "sibling:after"]  # in order
    assert [r.tool_name for r in done.messages[2].tool_results] == ["sibling", "coder", "sibling"]


@pytest.mark.spec("S000-38")
@pytest.mark.parametrize("approved", [True, False])
async def test_settled_tool_result_streams_before_the_first_step_start(
    approved: bool,
) -> None:
    """In a resumed stream the settled call's tool-result precedes the first step-start."""
    store = nd.InMemorySessionStore()
    first = await suspend(store, "run-38")
    request = first.pending_approvals[0]
    checkpoint_step = store.load("run-38").step_index
    stream = nd.resume_stream_from_checkpoint(
        store,
        "run-38",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[verdict(request, approved)],
    )
    parts = await drain(stream)
    kinds = [p.type for p in parts]
    settled = next(
        i
        for i, p in enumerate(parts)
        if isinstance(p, ToolResultStreamPart) and p.result.tool_call_id == request.tool_call_id
    )
    first_start = kinds.index("step-start")
    assert settled < first_start
    assert parts[settled].result.is_error is (not approved)
    starts = [p.step_index for p in parts if isinstance(p, StepStartPart)]
    assert starts == [checkpoint_step + 1, checkpoint_step + 2]
    assert all(
        getattr(p, "step_index", checkpoint_step + 1) > checkpoint_step for p in parts
    )  # no part of the new leg reuses an old index
    assert kinds[-1] == "finish"
