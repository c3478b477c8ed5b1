"""``wait(*states, timeout=None)`` on runs, task runs and graphs (issue 23).

A waiter returns when a requested state is reached, raises ``RunEndedError`` as
soon as the run or graph is final in a state it did not ask for (instead of
waiting forever), and raises ``TimeoutError`` when its timeout passes, leaving
the run as it was. Every test runs on each store that keeps run records; the
last one has the run finished by a worker in another process.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from support import runtime_agents
from support.runtime_harness import worker

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime, GraphNode

SLACK = 30.0
"""A timeout no correct waiter comes near: hitting it means the waiter missed the end."""


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table (a human approves each call)."""
    return f"dropped {name}"


def talker(agent_id: str = "talker") -> Agent:
    """An agent that answers at once: it never waits for an approval."""
    return Agent(agent_id, nd.ScriptedModel(["hello"] * 20, mode="sequential"), version="1")


def janitor() -> Agent:
    """An agent that asks to drop a table (an approval), then says it is done."""
    model = nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), "done"])
    return Agent("janitor", model, [drop_table], version="1")


def broken() -> Agent:
    """An agent whose model fails on every attempt."""
    model = nd.ScriptedModel(["never"], fail_on={1: RuntimeError("down"), 2: RuntimeError("down")})
    return Agent("broken", model, version="1", model_retry=nd.ModelRetry(max_attempts=2))


async def test_wait_returns_the_record_once_a_requested_state_is_reached(store: Any) -> None:
    async with await DurableRuntime.open(store=store, agents=[janitor()]) as rt:
        run = await rt.submit("janitor", "Clean up.")
        record = await run.wait("waiting_approval", timeout=SLACK)
        assert (record.run_id, record.state) == (run.run_id, "waiting_approval")
        # already there: at once, even with a zero timeout
        assert (await run.wait("waiting_approval", "completed", timeout=0)).state == (
            "waiting_approval"
        )
        await run.approve()
        assert (await run.wait(timeout=SLACK)).state == "completed"


async def test_wait_raises_run_ended_error_when_the_run_completes_without_the_state(
    store: Any,
) -> None:
    async with await DurableRuntime.open(store=store, agents=[talker()]) as rt:
        run = await rt.submit("talker", "Hi.")
        with pytest.raises(nd.RunEndedError) as caught:
            await run.wait("waiting_approval", timeout=SLACK)
        error = caught.value
        assert isinstance(error, nd.NbdurableError)
        assert (error.run_id, error.state, error.wanted) == (
            run.run_id,
            "completed",
            ("waiting_approval",),
        )
        assert str(error) == f"{run.run_id!r} ended completed, not waiting_approval"
        # a finished run raises at once on every later wait for another state
        with pytest.raises(nd.RunEndedError):
            await run.wait("running", "retry_wait", timeout=0)


async def test_run_ended_error_carries_the_reason_of_a_failed_run(store: Any) -> None:
    async with await DurableRuntime.open(store=store, agents=[broken()]) as rt:
        run = await rt.submit("broken", "Summarise.")
        with pytest.raises(nd.RunEndedError) as caught:
            await run.wait("completed", "waiting_approval", timeout=SLACK)
        assert (caught.value.state, caught.value.reason) == ("failed", "model_retries_exhausted")
        assert "failed (model_retries_exhausted), not completed or waiting_approval" in str(
            caught.value
        )
        # waiting for any final state (no states) returns the failed record instead
        assert (await run.wait(timeout=SLACK)).state == "failed"
        assert (await run.wait("failed", timeout=SLACK)).reason == "model_retries_exhausted"


async def test_a_waiter_already_waiting_wakes_with_run_ended_error_when_the_run_is_cancelled(
    store: Any,
) -> None:
    async with await DurableRuntime.open(store=store, agents=[janitor()]) as rt:
        run = await rt.submit("janitor", "Clean up.")
        await run.wait("waiting_approval", timeout=SLACK)
        waiter = asyncio.create_task(run.wait("completed", timeout=SLACK))
        await asyncio.sleep(0.1)
        assert not waiter.done()
        await run.cancel()
        with pytest.raises(nd.RunEndedError) as caught:
            await waiter
        assert (caught.value.state, caught.value.reason) == ("cancelled", "cancelled")


async def test_wait_times_out_with_timeout_error_and_leaves_the_run_as_it_was(store: Any) -> None:
    async with await DurableRuntime.open(store=store, agents=[janitor()]) as rt:
        run = await rt.submit("janitor", "Clean up.")
        await run.wait("waiting_approval", timeout=SLACK)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"is still waiting_approval after 0\.3 s"):
            await run.wait("completed", timeout=0.3)
        assert time.monotonic() - started >= 0.3
        assert run.status == "waiting_approval"
        await run.approve()
        assert (await run.result()).text == "done"


async def test_wait_refuses_a_name_that_is_not_a_state(store: Any) -> None:
    async with await DurableRuntime.open(store=store, agents=[talker()]) as rt:
        run = await rt.submit("talker", "Hi.")
        with pytest.raises(nd.ConfigurationError, match="'waiting-approval'"):
            await run.wait("waiting-approval")
        with pytest.raises(nd.ConfigurationError, match="timeout"):
            await run.wait("completed", timeout=-1)
        assert (await run.wait(timeout=SLACK)).state == "completed"


async def test_a_task_run_waits_the_same_way(store: Any) -> None:
    async def double(ctx: nd.TaskContext, state: Any) -> Any:
        return {"n": state["n"] * 2}

    task = nd.define_task("double", double)
    async with await DurableRuntime.open(store=store, tasks=[task]) as rt:
        run = await rt.submit_task("double", {"n": 2})
        with pytest.raises(nd.RunEndedError) as caught:
            await run.wait("needs_attention", timeout=SLACK)
        assert caught.value.state == "completed"
        assert await run.result() == {"n": 4}


def memo_graph() -> list[GraphNode]:
    return [
        GraphNode("draft", "talker", "Draft it."),
        GraphNode("publish", "janitor", "Publish it.", depends_on=["draft"]),
    ]


async def test_graph_wait_returns_on_a_requested_status_and_raises_once_final(
    store: Any,
) -> None:
    async with await DurableRuntime.open(store=store, agents=[talker(), janitor()]) as rt:
        graph = await rt.submit_graph(memo_graph(), graph_id="memo")
        assert await graph.wait("waiting_approval", timeout=SLACK) == "waiting_approval"
        with pytest.raises(TimeoutError, match="graph 'memo' is still waiting_approval"):
            await graph.wait("completed", timeout=0.2)
        await graph.node("publish").approve()
        assert await graph.wait(timeout=SLACK) == "completed"
        # submitting the same graph again hands back the finished one: its waiter
        # says so at once instead of waiting for an approval that never comes
        again = await rt.submit_graph(memo_graph(), graph_id="memo")
        with pytest.raises(nd.RunEndedError) as caught:
            await again.wait("waiting_approval", timeout=SLACK)
        assert (caught.value.run_id, caught.value.state) == ("memo", "completed")
        with pytest.raises(nd.ConfigurationError):
            await again.wait("queued")


async def test_graph_wait_names_the_reason_of_a_failed_node(store: Any) -> None:
    async with await DurableRuntime.open(store=store, agents=[broken(), talker()]) as rt:
        graph = await rt.submit_graph(
            [
                GraphNode("a", "broken", "Try."),
                GraphNode("b", "talker", "Then.", depends_on=["a"]),
            ]
        )
        with pytest.raises(nd.RunEndedError) as caught:
            await graph.wait("completed", timeout=SLACK)
        assert caught.value.state == "failed"
        assert caught.value.reason == "model_retries_exhausted"
        assert caught.value.run_id == graph.graph_id


async def test_wait_sees_the_end_written_by_a_worker_in_another_process(
    store_url: str, tmp_path: Path
) -> None:
    """The run completes in a `nbdurable worker` process; the waiter here, on a
    runtime that executes nothing, raises RunEndedError instead of waiting on."""
    if store_url == "memory://":
        pytest.skip("a memory store is not shared with another process")
    store = nd.open_store(store_url)
    proc = worker(store_url, tmp_path / "log")
    try:
        client = DurableRuntime(store=store, agents=[runtime_agents.single])
        run = await client.submit("single", "Probe.")
        with pytest.raises(nd.RunEndedError) as caught:
            await run.wait("waiting_approval", timeout=SLACK)
        assert caught.value.state == "completed"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        store.close()
