"""A run executed on Temporal, read by a client written to seed 004.

The same rule as on the embedded engine: the terminal event is the last event
the run writes while final; a retried model attempt is not an end; a retry()
leg starts with ``run_started`` (``retried: true``) after the old end.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from support.seed_consumer import ConsumerCrash, SeedConsumer, assert_read_the_whole_log, polling

import nbdurable as nd

from .conftest import Cluster


@pytest.mark.spec("S004-19", "S004-20")
async def test_a_retried_model_error_reads_through_to_run_finished(
    cluster: Cluster,
) -> None:
    cluster.worker()
    store = cluster.store
    async with cluster.runtime() as rt:
        run = await rt.submit("flaky", "Answer, eventually.")
        consumer = SeedConsumer()
        consumer.save_run_id(run.run_id)
        with contextlib.suppress(ConsumerCrash):
            await consumer.consume(polling(store), crash_after=4)
        await consumer.consume(polling(store))
        record = await asyncio.wait_for(run.wait(), 30)
    log = list(store.read_events(run.run_id))
    assert record.state == "completed"
    assert_read_the_whole_log(consumer, log)
    types = [e.type for e in log]
    assert "run_error" not in types and types.count("model_attempt_failed") == 1
    assert log[-1].type == "run_finished" and log[-1].payload["state"] == "completed"
    assert log[-1].payload["finish_reason"] == "stop"


@pytest.mark.spec("S004-19")
async def test_a_failed_run_ends_with_run_error_and_its_retry_leg_follows(
    cluster: Cluster,
) -> None:
    cluster.worker()
    store = cluster.store
    async with cluster.runtime() as rt:
        run = await rt.submit("fragile", "Answer once.")
        first = SeedConsumer()
        first.save_run_id(run.run_id)
        await first.consume(polling(store))
        record = await asyncio.wait_for(run.wait(), 30)
        assert record.state == "failed" and record.reason == "model_error"
        log = list(store.read_events(run.run_id))
        assert_read_the_whole_log(first, log)
        end = log[-1]
        assert end.type == "run_error" and end.payload["state"] == "failed"
        assert "503" in end.payload["message"]

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
    assert [e.type for e in log].count("run_error") == 1
    assert nd.fold_events(log).status == "completed"
