"""A runtime run's log as a client written to seed 004 reads it.

The terminal event (``run_finished``, ``run_error``) is the last event a run
writes while it is final; a model attempt that will be retried is not one; a
``retry()`` starts a new leg whose ``run_started`` (``retried: true``) follows
the old terminal event, and a consumer reconnecting by offset reads it. The
consumer is :mod:`support.seed_consumer`, written to the seed's pseudo-code.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.seed_consumer import SeedConsumer, assert_read_the_whole_log, polling

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime, ModelRetry

from .conftest import GatedModel

FAST = ModelRetry(max_attempts=3, initial_delay_ms=10, max_delay_ms=20)


async def _log(store: Any, run_id: str) -> list[nd.Event]:
    return list(await nd.read_events(store, run_id))


@pytest.mark.spec("S004-19")
async def test_a_cancelled_run_ends_with_run_error_naming_the_cancellation(
    store: Any,
) -> None:
    """Cancellation ends the stream with run_error (state cancelled), the
    log's last event; a seed consumer stops there and clears its state."""
    gate = asyncio.Event()
    model = GatedModel(["never"], gate=gate)
    async with await DurableRuntime.open(
        store=store, agents=[Agent("slow", model, version="1")]
    ) as rt:
        run = await rt.submit("slow", "Wait.")
        consumer = SeedConsumer()
        consumer.save_run_id(run.run_id)
        reading = asyncio.get_running_loop().create_task(consumer.consume(polling(store)))
        await run.wait("running")
        await run.cancel()
        await reading
        record = await run.wait()
        log = await _log(store, run.run_id)
    assert record.state == "cancelled"
    assert_read_the_whole_log(consumer, log)
    assert log[-1].type == "run_error" and log[-1].payload["state"] == "cancelled"
    assert [e.type for e in log].count("run_error") == 1
    assert nd.fold_events(log).status == "cancelled"


async def test_needs_attention_is_not_an_end_and_its_retry_leg_is_marked(store: Any) -> None:
    """A run in needs_attention waits for a human: no terminal event; after
    retry() its next leg's run_started says retried: true, and the run ends
    with run_finished as its last event."""
    model = nd.ScriptedModel([nd.Turn.call("ask"), "Went on without an answer."])
    agent = Agent("client", model, [nd.client_tool("ask")], version="1")
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("client", "Ask.")
        await run.wait("needs_attention")
        log = await _log(store, run.run_id)
        assert not {"run_error", "run_finished"} & {e.type for e in log}
        assert log[-1].type == "run_state" and log[-1].payload["state"] == "needs_attention"
        await run.retry()
        await run.result()
        log = await _log(store, run.run_id)
    starts = [e.payload for e in log if e.type == "run_started"]
    assert starts[-1] == {"resumed": True, "next_step_index": 1, "retried": True}
    assert "retried" not in starts[0]
    assert log[-1].type == "run_finished"
    assert [e.type for e in log].count("run_finished") == 1


async def test_run_stream_and_subscribe_end_at_the_terminal_event(store: Any) -> None:
    """Run.stream() (what the widget and the CLI follow) replays through the
    terminal event and ends there, for a completed and a failed run."""
    ok = Agent("ok", nd.ScriptedModel(["done"]), version="1")
    bad = Agent("bad", nd.ScriptedModel(["never"], fail_on=[1]), version="1")
    async with await DurableRuntime.open(store=store, agents=[ok, bad]) as rt:
        for agent, end in (("ok", "run_finished"), ("bad", "run_error")):
            run = await rt.submit(agent, "hi")
            consumer = SeedConsumer()
            consumer.save_run_id(run.run_id)
            await consumer.consume(lambda _id, after, run=run: run.stream(after))
            await run.wait()
            log = await _log(store, run.run_id)
            assert_read_the_whole_log(consumer, log)
            assert log[-1].type == end
            streamed = [e async for e in run.stream()]
            assert streamed == log


async def test_a_run_stopped_on_approval_never_reads_as_a_bare_suspended(store: Any) -> None:
    """A widget folds the log as it arrives: between a leg's run_suspended and the
    run_state that follows, a run that stopped on an approval already reads as
    waiting_approval (seen in JupyterLab: the card was up, the badge said suspended)."""

    @nd.tool(needs_approval=True)
    def drop(name: str) -> str:
        """Drop a table."""
        return f"dropped {name}"

    model = nd.ScriptedModel([nd.Turn.call("drop", "Dropping.", name="t"), "over"])
    async with await DurableRuntime.open(
        store=store, agents=[Agent("dba", model, [drop], version="1")]
    ) as rt:
        run = await rt.submit("dba", "Drop t.")
        await run.wait("waiting_approval")
        log = await _log(store, run.run_id)
    ended = [i for i, e in enumerate(log) if e.type == "run_suspended"]
    assert ended, [e.type for e in log]
    seen = {nd.fold_events(log[: i + 1]).status for i in range(ended[0], len(log))}
    assert seen == {"waiting_approval"}
