"""Runs: prompts, request ids, session queues and concurrency slots."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.models._base import ModelRequest
from nbdurable.runtime import Agent, DurableRuntime, Limits, RunFailedError

from .conftest import FakeClock, eventually, states_of


def text_agent(agent_id: str = "a", text: str = "hello", **kwargs: Any) -> Agent:
    return Agent(agent_id, nd.ScriptedModel([text] * 50, mode="sequential"), version="1", **kwargs)


class Tracker:
    """Counts executions of the ``work`` tool in flight (one per run at a time)."""

    def __init__(self, delay: float = 0.05) -> None:
        self.delay = delay
        self.active = 0
        self.peak = 0
        self.log: list[tuple[str, str]] = []

    def tool(self) -> nd.Tool:
        @nd.tool
        async def work(item: str) -> str:
            """Work on an item for a while."""
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.log.append(("start", item))
            try:
                await asyncio.sleep(self.delay)
            finally:
                self.active -= 1
                self.log.append(("end", item))
            return f"worked on {item}"

        return work


def _work_turn(request: ModelRequest) -> nd.Turn:
    """Call ``work`` on the latest user prompt's text, then say it is done."""
    last = request.messages[-1]
    if last.role == "user":
        return nd.Turn.call("work", item=last.text)
    return nd.Turn(text="done")


def work_agent(tracker: Tracker, agent_id: str = "w", **kwargs: Any) -> Agent:
    model = nd.ScriptedModel([_work_turn] * 200, mode="sequential")
    return Agent(agent_id, model, [tracker.tool()], version="1", **kwargs)


# -- prompts ----------------------------------------------------------------------------------


@pytest.mark.spec("S003-34")
async def test_prompt_is_a_nonblank_string_or_user_message(store: Any) -> None:
    """Blank strings and non-prompt values are rejected with a typed error;
    a nonblank string and a user message are accepted."""
    async with await DurableRuntime.open(store=store, agents=[text_agent()]) as rt:
        for bad in ("", "   ", "\n\t", 123, None, ["hi"]):
            with pytest.raises(nd.ConfigurationError):
                await rt.submit("a", bad)  # type: ignore[arg-type]
        assert rt.list_runs() == []
        assert (await (await rt.submit("a", "hi")).result()).text == "hello"
        assert (await (await rt.submit("a", nd.user("hi"))).result()).text == "hello"


@pytest.mark.spec("S003-35")
async def test_media_only_accepted_empty_nonuser_invalid_rejected(store: Any) -> None:
    """A media-only user message is accepted; an empty message, a non-user
    role, blank-only text and parts a user message cannot hold are rejected."""
    model = nd.ScriptedModel(["a picture"] * 5, mode="sequential", keep_requests=None)
    async with await DurableRuntime.open(
        store=store, agents=[Agent("a", model, version="1")]
    ) as rt:
        rejected: list[Any] = [
            nd.Message(role="user", content=[]),
            {"role": "user", "content": []},
            nd.assistant("hi"),
            nd.system("be nice"),
            {"role": "assistant", "content": "hi"},
            nd.Message(role="user", content=[nd.TextPart(text="  ")]),
            nd.Message(
                role="user",
                content=[nd.ToolCallPart(tool_call_id="c1", tool_name="work", args={})],
            ),
            nd.Message(
                role="user",
                content=[nd.ToolResultPart(tool_call_id="c1", tool_name="work", result=1)],
            ),
            {"role": "user", "content": [{"type": "audio", "data": "x"}]},
        ]
        for bad in rejected:
            with pytest.raises(nd.ConfigurationError):
                await rt.submit("a", bad)
        assert rt.list_runs() == []

        image = nd.ImagePart(url="https://example.com/cat.png", media_type="image/png")
        run = await rt.submit("a", nd.Message(role="user", content=[image]))
        assert (await run.result()).text == "a picture"
        assert model.requests[0].messages[-1].content == (image,)


@pytest.mark.spec("S003-36")
async def test_media_is_neither_fetched_nor_transformed(store: Any) -> None:
    """A URL image stays an external reference (an unreachable URL is fine:
    nothing fetches it) and inline data reaches the model and the history as the
    same bytes."""
    model = nd.ScriptedModel(["ok"] * 5, mode="sequential", keep_requests=None)
    raw = os.urandom(64)
    inline = nd.ImagePart(data=raw, media_type="image/png")
    remote = nd.ImagePart(url="http://unreachable.invalid/cat.png")
    prompt = nd.Message(role="user", content=[nd.TextPart(text="compare"), inline, remote])
    async with await DurableRuntime.open(
        store=store, agents=[Agent("a", model, version="1")]
    ) as rt:
        run = await rt.submit("a", prompt)
        result = await run.result()
    sent = model.requests[0].messages[-1]
    assert sent == prompt
    assert sent.content[1].data == raw
    assert sent.content[2].url == "http://unreachable.invalid/cat.png"
    assert sent.content[2].data is None
    assert result.messages[0] == prompt
    stored = run.record().prompt_value
    assert stored == prompt and stored.content[1].data == raw


@pytest.mark.spec("S003-39")
async def test_prompts_persist_for_restart_retry_and_session_history(
    store: Any, reopen: Any
) -> None:
    """The prompt (str or user message) is persisted: it is the same after a
    restart, a retry sends it again, and a later run of the session sees it."""
    image = nd.ImagePart(data=b"\x89PNG-bytes", media_type="image/png")
    prompt = nd.Message(role="user", content=[nd.TextPart(text="what is it?"), image])
    model = nd.ScriptedModel(
        ["a logo", "still a logo"], mode="sequential", fail_on=[1], keep_requests=None
    )
    agent = Agent("a", model, version="1")
    async with await DurableRuntime.open(store=store, agents=[agent, text_agent("p")]) as rt:
        run = await rt.submit("a", prompt, session_id="s")
        with pytest.raises(RunFailedError):
            await run.result()
        assert run.record().prompt_value == prompt
        plain = await rt.submit("p", "plain text", session_id="other")
        await plain.wait()
        assert plain.record().prompt_value == "plain text"

    second = reopen(store)
    async with await DurableRuntime.open(store=second, agents=[agent]) as rt:
        again = await rt.get_run(run.run_id)
        assert again.record().prompt_value == prompt
        await again.retry()
        assert (await again.result()).text == "a logo"
        assert model.requests[1].messages[-1] == prompt  # the retry sent it again
        follow = await rt.submit("a", "and now?", session_id="s")
        assert (await follow.result()).text == "still a logo"
        history = model.requests[2].messages
        assert history[0] == prompt
        assert history[-1] == nd.user("and now?")


@pytest.mark.spec("S003-40")
async def test_request_id_dedup_ignores_key_order_conflicts_on_change(
    store: Any,
) -> None:
    """An equivalent JSON prompt (key order ignored) under a request id gives
    one run; changed content or metadata under it is a DurableConflictError."""
    one = {
        "role": "user",
        "content": [{"type": "text", "text": "hi"}],
        "metadata": {"a": 1, "b": 2},
    }
    two = {
        "metadata": {"b": 2, "a": 1},
        "content": [{"text": "hi", "type": "text"}],
        "role": "user",
    }
    async with await DurableRuntime.open(store=store, agents=[text_agent("a")]) as rt:
        first = await rt.submit("a", one, request_id="r")
        same = await rt.submit("a", two, request_id="r")
        also = await rt.submit(
            "a", nd.user("hi", metadata={"b": 2, "a": 1}), request_id="r", session_id="x"
        )
        assert first.run_id == same.run_id == also.run_id
        assert len(rt.list_runs()) == 1
        changed_text = {**one, "content": [{"type": "text", "text": "hello"}]}
        changed_meta = {**one, "metadata": {"a": 1, "b": 3}}
        for changed in (changed_text, changed_meta, "hi"):
            with pytest.raises(nd.DurableConflictError, match="request id"):
                await rt.submit("a", changed, request_id="r")
        rt.register_agents([text_agent("b")])
        with pytest.raises(nd.DurableConflictError):
            await rt.submit("b", one, request_id="r")
        assert len(rt.list_runs()) == 1
        await first.result()


@pytest.mark.spec("S003-41")
async def test_inline_media_counts_toward_max_payload_bytes(store: Any) -> None:
    """The prompt's size is the UTF-8 bytes of its JSON, base64 media
    included; over max_payload_bytes it is refused at submit."""
    limits = Limits(max_payload_bytes=1000)
    async with await DurableRuntime.open(store=store, agents=[text_agent()], limits=limits) as rt:
        small = nd.Message(role="user", content=[nd.ImagePart(data=b"x" * 10)])
        await (await rt.submit("a", small)).result()
        text = nd.Message(role="user", content=[nd.TextPart(text="x" * 900)])
        await (await rt.submit("a", text)).wait()  # 900 characters of text fit...
        big = nd.Message(role="user", content=[nd.ImagePart(data=b"x" * 720)])
        with pytest.raises(nd.LimitExceededError) as caught:  # ...720 bytes in base64 do not
            await rt.submit("a", big)
        assert caught.value.limit == "max_payload_bytes"
        assert caught.value.value > 960
        assert len(rt.list_runs()) == 2


@pytest.mark.spec("S003-41")
async def test_history_and_checkpoints_count_toward_max_payload_bytes(
    store: Any,
) -> None:
    """Session history and checkpoints count too: a run whose checkpoint
    (history included) outgrows max_payload_bytes fails with reason limit_exceeded."""
    limits = Limits(max_payload_bytes=4000)
    agent = Agent("a", nd.ScriptedModel(["y" * 2500] * 5, mode="sequential"), version="1")
    async with await DurableRuntime.open(store=store, agents=[agent], limits=limits) as rt:
        first = await rt.submit("a", "long answer please", session_id="s")
        assert len((await first.result()).text) == 2500
        second = await rt.submit("a", "another one", session_id="s")
        with pytest.raises(RunFailedError) as caught:
            await second.result()
        assert caught.value.reason == "limit_exceeded"
        assert "max_payload_bytes" in (caught.value.error or "")


# -- queues and scheduling ----------------------------------------------------------------------


@pytest.mark.spec("S003-42")
async def test_enqueue_persists_a_follow_on_run(store: Any, reopen: Any) -> None:
    """enqueue=True persists the run as queued behind the session's
    unfinished run (a restart still finds it); it runs when that one finishes."""
    idle = DurableRuntime(store=store, agents=[text_agent()])
    head = await idle.submit("a", "first", session_id="s")
    tail = await idle.submit("a", "second", session_id="s", enqueue=True)
    assert (head.status, tail.status) == ("pending", "queued")
    assert await states_of(store, tail.run_id) == ["queued"]

    second = reopen(store)
    async with await DurableRuntime.open(store=second, agents=[text_agent()]) as rt:
        assert [r.run_id for r in rt.list_runs(status="queued")] == [tail.run_id]
        tail = await rt.get_run(tail.run_id)
        await tail.result()
        head = await rt.get_run(head.run_id)
        assert head.status == "completed"
        assert head.record().updated_at <= tail.record().updated_at
        assert (await states_of(second, tail.run_id))[:3] == ["queued", "pending", "running"]


@pytest.mark.spec("S003-43")
async def test_submit_into_busy_session_without_enqueue_fails(store: Any) -> None:
    """Without enqueue, a session with an unfinished run refuses another run;
    once the session is idle, a plain submit works."""
    gate = asyncio.Event()

    @nd.tool
    async def wait_tool() -> str:
        """Wait."""
        await gate.wait()
        return "ok"

    def turn(request: ModelRequest) -> nd.Turn:
        return nd.Turn.call("wait_tool") if request.messages[-1].role == "user" else nd.Turn("ok")

    agent = Agent("a", nd.ScriptedModel([turn] * 10, mode="sequential"), [wait_tool], version="1")
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        first = await rt.submit("a", "one", session_id="s")
        with pytest.raises(nd.DurableConflictError, match="enqueue"):
            await rt.submit("a", "two", session_id="s")
        assert len(rt.list_runs()) == 1
        other = await rt.submit("a", "elsewhere", session_id="t")  # other sessions are free
        gate.set()
        await first.result()
        await other.wait()
        later = await rt.submit("a", "three", session_id="s")
        await later.wait()
        assert later.status == "completed"


@pytest.mark.spec("S003-44")
async def test_repeated_request_id_returns_original_run(store: Any) -> None:
    """Repeating a request id returns the original run, with or without
    enqueue, while the session is busy and after the run finished."""
    gate = asyncio.Event()

    @nd.tool
    async def wait_tool() -> str:
        """Wait."""
        await gate.wait()
        return "ok"

    agent = Agent(
        "a", nd.ScriptedModel([nd.Turn.call("wait_tool"), "done"]), [wait_tool], version="1"
    )
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("a", "go", session_id="s", request_id="req")
        await run.wait("running")
        for enqueue in (False, True):
            repeat = await rt.submit("a", "go", session_id="s", request_id="req", enqueue=enqueue)
            assert repeat.run_id == run.run_id
        assert len(rt.list_runs()) == 1
        gate.set()
        await run.result()
        repeat = await rt.submit("a", "go", session_id="s", request_id="req")
        assert repeat.run_id == run.run_id
        assert len(rt.list_runs()) == 1
        assert (await states_of(store, run.run_id)).count("pending") == 1


@pytest.mark.spec("S003-45")
async def test_only_the_oldest_unfinished_run_of_a_session_executes(
    store: Any,
) -> None:
    """Runs of one session execute one at a time in submission order (FIFO),
    even with free slots."""
    tracker = Tracker(delay=0.03)
    async with await DurableRuntime.open(
        store=store, agents=[work_agent(tracker)], max_concurrent_runs=4
    ) as rt:
        runs = [await rt.submit("w", "r0", session_id="s")]
        for i in range(1, 4):
            runs.append(await rt.submit("w", f"r{i}", session_id="s", enqueue=True))
        assert [r.status for r in runs[1:]] == ["queued"] * 3
        for run in runs:
            await run.result()
    assert tracker.peak == 1
    assert tracker.log == [(kind, f"r{i}") for i in range(4) for kind in ("start", "end")]


@pytest.mark.spec("S003-46")
async def test_queued_run_gets_latest_completed_history_only(store: Any) -> None:
    """A queued run starts from the latest completed history of its session;
    a failed predecessor (with partial history) and a cancelled one add nothing."""
    stuck_calls: list[str] = []

    @nd.tool
    def quick(item: str) -> str:
        """Quick work."""
        return f"quick {item}"

    @nd.tool
    async def stuck(item: str) -> str:
        """Work that hangs."""
        stuck_calls.append(item)
        await asyncio.Event().wait()
        return "never"

    last_model = nd.ScriptedModel(["A4"], mode="sequential", keep_requests=None)
    agents = [
        Agent("first", nd.ScriptedModel(["A1"]), version="1"),
        # One tool step (a checkpoint with partial history), then the model fails.
        Agent(
            "failing",
            nd.ScriptedModel(
                [nd.Turn.call("quick", item="p"), "never"], mode="sequential", fail_on=[2]
            ),
            [quick],
            version="1",
        ),
        # One tool step, then a tool that hangs until the run is cancelled.
        Agent(
            "hanging",
            nd.ScriptedModel(
                [nd.Turn.call("quick", item="h"), nd.Turn.call("stuck", item="h")],
                mode="sequential",
            ),
            [quick, stuck],
            version="1",
        ),
        Agent("last", last_model, version="1"),
    ]
    async with await DurableRuntime.open(store=store, agents=agents) as rt:
        r1 = await rt.submit("first", "q1", session_id="s")
        r2 = await rt.submit("failing", "q2", session_id="s", enqueue=True)
        r3 = await rt.submit("hanging", "q3", session_id="s", enqueue=True)
        r4 = await rt.submit("last", "q4", session_id="s", enqueue=True)
        await r1.result()
        assert (await r2.wait()).state == "failed"
        await eventually(lambda: stuck_calls == ["h"])  # step 0 is checkpointed
        await r3.cancel()
        assert (await r3.wait()).state == "cancelled"
        assert (await r4.result()).text == "A4"
    texts = [(m.role, m.text) for m in last_model.requests[0].messages]
    assert texts == [("user", "q1"), ("assistant", "A1"), ("user", "q4")]


@pytest.mark.spec("S003-47")
async def test_approval_and_needs_attention_pause_session_but_free_slot(
    store: Any,
) -> None:
    """With one slot, a run waiting for approval (or in needs_attention)
    holds its session's queue but lets other sessions run."""

    @nd.tool(needs_approval=True)
    def drop(name: str) -> str:
        """Drop a table."""
        return f"dropped {name}"

    agents = [
        Agent(
            "approver",
            nd.ScriptedModel([nd.Turn.call("drop", name="t"), "dropped"]),
            [drop],
            version="1",
        ),
        Agent(
            "client", nd.ScriptedModel([nd.Turn.call("ask")]), [nd.client_tool("ask")], version="1"
        ),
        text_agent("plain", "plain"),
    ]
    clock = FakeClock()
    async with await DurableRuntime.open(
        store=store, agents=agents, max_concurrent_runs=1, deps=clock.deps()
    ) as rt:
        waiting = await rt.submit("approver", "drop t", session_id="s1")
        await waiting.wait("waiting_approval")
        behind = await rt.submit("plain", "after approval", session_id="s1", enqueue=True)

        attention = await rt.submit("client", "ask", session_id="s2")
        await attention.wait("needs_attention")
        behind2 = await rt.submit("plain", "after attention", session_id="s2", enqueue=True)

        other = await rt.submit("plain", "elsewhere", session_id="s3")
        assert (await other.result()).text == "plain"  # the slot is free
        await clock.skip(60_000)  # the engine looked again
        assert (behind.status, behind2.status) == ("queued", "queued")

        await waiting.approve()
        assert (await waiting.result()).text == "dropped"
        assert (await behind.result()).text == "plain"
        assert behind2.status == "queued"
        await attention.cancel()
        assert (await behind2.result()).text == "plain"


@pytest.mark.spec("S003-48")
async def test_cancelled_run_keeps_its_slot_until_callbacks_settle(
    store: Any,
) -> None:
    """Cancelling an active run moves it to cancelling; it holds its slot
    (the next run does not start) until its tool's cleanup has finished."""
    release = asyncio.Event()
    started = asyncio.Event()

    @nd.tool
    async def work() -> str:
        """Work until cancelled, then clean up slowly."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await release.wait()
            raise
        return "never"

    agents = [
        Agent("slow", nd.ScriptedModel([nd.Turn.call("work")]), [work], version="1"),
        text_agent("plain", "plain"),
    ]
    clock = FakeClock()
    async with await DurableRuntime.open(
        store=store, agents=agents, max_concurrent_runs=1, deps=clock.deps()
    ) as rt:
        active = await rt.submit("slow", "go", session_id="s1")
        await started.wait()
        nxt = await rt.submit("plain", "next", session_id="s2")
        await clock.skip(1_000, idle=2)  # the engine looked again (and the lease was renewed)
        assert nxt.status == "pending"
        await active.cancel()
        assert active.status == "cancelling"
        await asyncio.sleep(0.25)
        assert (active.status, nxt.status) == ("cancelling", "pending")
        release.set()
        assert (await active.wait()).state == "cancelled"
        assert (await nxt.result()).text == "plain"
        with pytest.raises(RunFailedError) as caught:
            await active.result()
        assert caught.value.state == "cancelled"
    assert (await states_of(store, active.run_id))[-2:] == ["cancelling", "cancelled"]


# -- concurrency slots -------------------------------------------------------------------------


@pytest.mark.spec("S003-04")
async def test_max_concurrent_runs_defaults_to_a_hundred(store: Any) -> None:
    """Agents mostly wait on their models: by default 100 runs execute at once."""
    async with await DurableRuntime.open(store=store, agents=[]) as rt:
        assert rt.max_concurrent_runs == 100


@pytest.mark.spec("S003-04")
@pytest.mark.parametrize("cap", [1, 2, 4])
async def test_max_concurrent_runs_caps_executions(store: Any, cap: int) -> None:
    """At most max_concurrent_runs runs execute at once across sessions,
    and that many do run side by side (each tool call long enough
    to overlap the others' store calls, which run on store threads)."""
    tracker = Tracker(delay=0.3)
    options: dict[str, Any] = {"max_concurrent_runs": cap}
    expected = cap
    running_seen: list[int] = []
    async with await DurableRuntime.open(
        store=store, agents=[work_agent(tracker)], **options
    ) as rt:
        runs = [await rt.submit("w", f"job{i}") for i in range(expected * 2 + 1)]

        async def sample() -> None:
            while True:
                running_seen.append(len(rt.list_runs(status="running")))
                await asyncio.sleep(0.01)

        sampler = asyncio.get_running_loop().create_task(sample())
        try:
            for run in runs:
                assert (await run.result()).text == "done"
        finally:
            sampler.cancel()
    assert tracker.peak == expected
    assert max(running_seen) <= expected
