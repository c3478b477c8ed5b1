"""Every engine: a run's log as a client written to seed 004 reads it, reconnecting by offset.

The terminal event (``run_finished``, ``run_error``) is the last event a run
writes while it is final; a model attempt that will be retried is not one; a
``retry()`` starts a new leg whose ``run_started`` (``retried: true``) follows
the old terminal event, and a consumer that kept its offset (``after=N``) reads
it. The consumer is :mod:`support.seed_consumer`, written to the seed's pseudo-code.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from support.seed_consumer import ConsumerCrash, SeedConsumer, assert_read_the_whole_log, polling

import nbdurable as nd

from .conftest import EngineCase


@pytest.mark.spec("S004-19", "S004-20")
async def test_a_retried_model_error_is_not_the_end_of_the_stream(engine: EngineCase) -> None:
    """A model error the policy retries writes model_attempt_failed and the
    retry_wait state, never run_error: the seed consumer (crashing once and
    reconnecting by offset) reads through to run_finished, the log's last event."""
    engine.worker()
    store = engine.store
    async with engine.client() as rt:
        run = await rt.submit("flaky", "Answer, eventually.")
        consumer = SeedConsumer()
        consumer.save_run_id(run.run_id)
        with contextlib.suppress(ConsumerCrash):
            await consumer.consume(polling(store), crash_after=4)
        await consumer.consume(polling(store))  # the restarted consumer
        record = await asyncio.wait_for(run.wait(), 30)
    log = list(store.read_events(run.run_id))
    assert record.state == "completed"
    assert_read_the_whole_log(consumer, log)
    types = [e.type for e in log]
    assert "run_error" not in types and types.count("model_attempt_failed") == 1
    assert "retry_wait" in [e.payload["state"] for e in log if e.type == "run_state"]
    assert log[-1].type == "run_finished" and log[-1].payload["state"] == "completed"
    assert log[-1].payload["finish_reason"] == "stop"
    assert (log[-2].type, log[-2].payload["state"]) == ("run_state", "completed")
    assert log[-1].to_part() == nd.parts.FinishPart.model_validate(
        {k: v for k, v in log[-1].payload.items() if k != "state"}
    )


@pytest.mark.spec("S004-19")
async def test_a_failed_run_ends_with_run_error_and_retry_starts_a_new_leg_after_it(
    engine: EngineCase,
) -> None:
    """A run that fails writes run_error last (state failed, the reason); retry()
    appends a leg whose run_started says retried: true, after the old terminal
    event; a consumer that kept its offset reads the new leg to its end."""
    engine.worker()
    store = engine.store
    async with engine.client() as rt:
        run = await rt.submit("fragile", "Answer once.")
        first = SeedConsumer()
        first.save_run_id(run.run_id)
        await first.consume(polling(store))
        record = await asyncio.wait_for(run.wait(), 30)
        assert record.state == "failed" and record.reason == "model_error"
        log = list(store.read_events(run.run_id))
        assert_read_the_whole_log(first, log)
        end = log[-1]
        assert end.type == "run_error"
        assert end.payload["state"] == "failed" and end.payload["reason"] == "model_error"
        assert end.payload["error_type"] == "RunFailedError"
        assert "503" in end.payload["message"]
        assert [e.type for e in log].count("run_error") == 1

        # a viewer that kept the offset of the end (another process) reconnects after retry()
        second = SeedConsumer(saved={"run_id": run.run_id, "offset": end.offset})
        watching = asyncio.get_running_loop().create_task(second.consume(polling(store)))
        await run.retry()  # the worker's model answers its second call
        await asyncio.wait_for(watching, 60)
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Answered on a later attempt."
    log = list(store.read_events(run.run_id))
    assert second.handled == [e.offset for e in log if e.offset > end.offset]
    assert log[-1].type == "run_finished" and second.cleared_at == [log[-1].offset]
    starts = second.payloads_of("run_started")
    assert starts == [{"resumed": False, "next_step_index": 0, "retried": True}]
    retried = second.payloads_of("run_state")
    assert retried[0] == {
        "state": "pending",
        "reason": None,
        "next_attempt_at": None,
        "retried": True,
    }
    assert "retried" not in retried[-1]  # the mark is cleared once the leg starts
    assert not run.record().retried
    assert [e.type for e in log].count("run_error") == 1
    assert nd.fold_events(log).status == "completed"
