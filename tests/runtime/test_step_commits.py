"""A runtime step's writes share commits, and each is durable before what depends on it.

The model's journal entry, its events and the first tool call's count and
``started`` intent commit together, before that tool starts; a later call of a
batch writes its own intent before it starts (with the results that wait); a
tool's ``completed`` intent rides the next commit. On SQLite a steady step is
three write transactions (the model call's count with the previous step's
results, the write before the tools, the checkpoint).
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime

LONG_LEASE = 60_000
SLOW_POLL = 5.0  # no lease renewal during these short runs


async def test_before_each_tool_starts_its_intent_the_journal_and_the_events_are_stored(
    store: Any, reopen: Any
) -> None:
    seen: list[dict[str, Any]] = []
    holder: dict[str, str] = {}

    def look(call: str) -> None:
        other = reopen(store)  # what a second process, or the next owner, would find
        run_id = holder["run_id"]
        intents = {i.tool_call_id: i.state for i in other.rt_intents(run_id)}
        types = [e.type for e in other.read_events(run_id)]
        seen.append(
            {
                "call": call,
                "intents": intents,
                "journaled": other.rt_journaled(run_id, 0) is not None,
                "operations": other.rt_get(run_id).operations,
                "model_completed": types.count("model_completed"),
                "tool_calls": types.count("tool_call"),
            }
        )

    @nd.tool(recovery="manual")
    def first(n: int) -> str:
        """First."""
        look("first")
        return "one"

    @nd.tool(recovery="manual")
    def second(n: int) -> str:
        """Second."""
        look("second")
        return "two"

    batch = nd.Turn(tool_calls=[("first", {"n": 1}), ("second", {"n": 2})])
    agent = Agent(
        "pair",
        nd.ScriptedModel([batch, "done"]),
        [first, second],
        version="1",
        max_tool_concurrency=1,
    )
    runtime = await DurableRuntime.open(
        store=store, agents=[agent], lease_ms=LONG_LEASE, poll_interval=SLOW_POLL
    )
    try:
        run = await runtime.submit("pair", "go")
        holder["run_id"] = run.run_id
        result = await run.result()
    finally:
        await runtime.close()
    assert result.text == "done"
    [at_first, at_second] = seen
    calls = sorted(at_second["intents"])
    assert len(calls) == 2
    # The first call: its intent, the model's response (journal and events) and both
    # calls' events were committed before it started; the model call and it are counted.
    assert list(at_first["intents"].values()) == ["started"]
    assert at_first["journaled"] and at_first["model_completed"] == 1
    assert at_first["tool_calls"] == 2 and at_first["operations"] == 2
    # The second: the first's result is recorded, its own intent written before it ran.
    assert sorted(at_second["intents"].values()) == ["completed", "started"]
    assert at_second["operations"] == 3
    final = store.rt_get(run.run_id)
    assert final.state == "completed" and final.model_attempts == 0
    assert {i.state for i in store.rt_intents(run.run_id)} == {"completed"}


async def test_a_steady_step_commits_three_times_on_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = 0
    marks: list[int] = []
    connect = sqlite3.connect

    def counting_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        writing = False  # this connection's open transaction is a write (not a read snapshot)

        def trace(statement: str) -> None:
            nonlocal commits, writing
            word = statement.lstrip().upper()
            if word.startswith("BEGIN"):
                writing = "IMMEDIATE" in word
            elif word.startswith("COMMIT"):
                commits += writing
                writing = False

        conn.set_trace_callback(trace)
        return conn

    monkeypatch.setattr(sqlite3, "connect", counting_connect)
    store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")

    @nd.tool(recovery="safe")
    def ping(i: int) -> str:
        """Ping."""
        marks.append(commits)
        return f"pong {i}"

    steps = 8
    turns: list[Any] = [nd.Turn(tool_calls=[("ping", {"i": i})]) for i in range(steps)]
    agent = Agent("pinger", nd.ScriptedModel([*turns, "done"]), [ping], version="1")
    try:
        runtime = await DurableRuntime.open(
            store=store, agents=[agent], lease_ms=LONG_LEASE, poll_interval=SLOW_POLL
        )
        try:
            run = await runtime.submit("pinger", "go")
            assert (await run.result()).text == "done"
        finally:
            await runtime.close()
    finally:
        store.close()
    per_step = [b - a for a, b in itertools.pairwise(marks)]
    assert len(per_step) == steps - 1
    assert per_step == [3] * (steps - 1), per_step


async def test_between_a_tool_s_end_and_its_checkpoint_the_call_is_still_started(
    store: Any, reopen: Any
) -> None:
    # A crash in that window is a crash during the tool: the next owner finds the
    # call started, and its recovery policy decides (the checkpoint, when it is
    # written, holds the result, and the completed intent rides a later commit).
    at_save: list[dict[str, str]] = []
    holder: dict[str, str] = {}
    save = store.save_with_events

    def watching_save(checkpoint: Any, events: Any, **options: Any) -> Any:
        other = reopen(store)
        at_save.append({i.tool_call_id: i.state for i in other.rt_intents(holder["run_id"])})
        return save(checkpoint, events, **options)

    store.save_with_events = watching_save

    @nd.tool(recovery="manual")
    def once(n: int) -> str:
        """Once."""
        return f"done {n}"

    turns: list[Any] = [nd.Turn(tool_calls=[("once", {"n": i})]) for i in range(2)]
    agent = Agent("once", nd.ScriptedModel([*turns, "done"]), [once], version="1")
    runtime = await DurableRuntime.open(
        store=store, agents=[agent], lease_ms=LONG_LEASE, poll_interval=SLOW_POLL
    )
    try:
        run = await runtime.submit("once", "go")
        holder["run_id"] = run.run_id
        assert (await run.result()).text == "done"
    finally:
        await runtime.close()
    # step 0's checkpoint: its call started, not completed; step 1's: step 0's call
    # completed (with step 1's model call), step 1's call started
    assert [sorted(seen.values()) for seen in at_save[:2]] == [
        ["started"],
        ["completed", "started"],
    ]
    assert {i.state for i in store.rt_intents(run.run_id)} == {"completed"}


async def test_a_leg_reads_the_journal_until_a_step_it_lacks_and_reuses_what_it_holds(
    store: Any,
) -> None:
    # The journal holds a run's steps up to some step and none after it (legs journal
    # in order, reusing what they meet): a leg reads it at each step until one it
    # lacks, then no more, and still reuses every entry before that step.
    reads: list[int] = []
    journaled = store.rt_journaled

    def counting(run_id: str, step_index: int) -> str | None:
        reads.append(step_index)
        return journaled(run_id, step_index)  # type: ignore[no-any-return]

    store.rt_journaled = counting
    ran: list[int] = []

    @nd.tool(needs_approval=True)
    def gate() -> str:
        """Needs a human."""
        return "open"

    @nd.tool
    def ping(i: int) -> str:
        """Ping."""
        ran.append(i)
        return f"pong {i}"

    # A script's turn is its step: steps 1 and 2 are the journal's, never the model's.
    unused = nd.Turn(text="never given")
    turns = [nd.Turn(tool_calls=[("gate", {})]), unused, unused]
    model = nd.ScriptedModel([*turns, nd.Turn(tool_calls=[("ping", {"i": 3})]), "done"])
    agent = Agent("gated", model, [gate, ping], version="1")
    runtime = await DurableRuntime.open(
        store=store, agents=[agent], lease_ms=LONG_LEASE, poll_interval=SLOW_POLL
    )
    try:
        run = await runtime.submit("gated", "go")
        await run.wait("waiting_approval")
        assert reads == [0]
        # What an earlier leg would have left: steps 1 and 2 journaled, not checkpointed.
        fence = store.rt_get(run.run_id).fence
        for step in (1, 2):
            call = nd.ToolCallPart(tool_call_id=f"j{step}", tool_name="ping", args={"i": step})
            response = nd.ModelResponse(content=(call,))
            store.rt_journal(run.run_id, step, response.model_dump_json(), fence=fence)
        await run.approve()
        assert (await run.result()).text == "done"
    finally:
        await runtime.close()
    # The resumed leg read steps 1 and 2 (reused) and 3 (lacked), then never again.
    assert reads == [0, 1, 2, 3]
    assert ran == [1, 2, 3]
