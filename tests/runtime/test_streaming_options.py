"""The runtime's streaming options: captured at submission, and the payload limit per delta."""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd
from nbdurable import events as ev


@nd.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def chatty(**kw: Any) -> nd.ScriptedModel:
    return nd.ScriptedModel(["one two three four five"], **kw)


@pytest.mark.spec("S003-32")
async def test_the_stream_option_is_fixed_when_the_run_is_submitted(store: Any) -> None:
    """A run submitted under stream=True streams even if a later registration
    of the agent (a new version) does not; it resumes under the version it recorded."""
    v1 = nd.Agent("talker", chatty(), [lookup], version="1", stream=True)
    v2 = nd.Agent("talker", chatty(), [lookup], version="2", stream=False)
    client = nd.DurableRuntime(store=store, agents=[v1])  # not started: submits only
    streamed = await client.submit("talker", "talk")
    async with await nd.DurableRuntime.open(store=store, agents=[v1]) as runtime:
        runtime.register_agents([v2])
        quiet = await runtime.submit("talker", "talk")  # the latest version: v2
        await streamed.result()
        await quiet.result()
    assert streamed.record().agent_version == "1" and streamed.record().stream is True
    assert quiet.record().agent_version == "2" and quiet.record().stream is False
    deltas = [e for e in store.read_events(streamed.run_id) if e.type == ev.MODEL_DELTA]
    assert len(deltas) == 5
    assert not [e for e in store.read_events(quiet.run_id) if e.type == ev.MODEL_DELTA]


@pytest.mark.spec("S003-25", "S003-33")
async def test_max_payload_bytes_applies_to_each_delta(store: Any) -> None:
    """One delta over max_payload_bytes fails the run with limit_exceeded (the
    model is not retried for it); deltas under it stream fine."""
    big = "x" * 400
    agent = nd.Agent(
        "talker",
        nd.ScriptedModel([f"small {big} "]),
        [lookup],
        version="1",
        stream=True,
        model_retry=nd.ModelRetry(max_attempts=3, initial_delay_ms=1, max_delay_ms=1),
    )
    limits = nd.Limits(max_payload_bytes=300)
    async with await nd.DurableRuntime.open(store=store, agents=[agent], limits=limits) as rt:
        run = await rt.submit("talker", "talk")
        record = await run.wait()
    assert record.state == "failed" and record.reason == "limit_exceeded"
    assert "max_payload_bytes" in (record.error or "")
    assert record.model_attempts == 1  # not retried as a model error
    deltas = [e for e in store.read_events(run.run_id) if e.type == ev.MODEL_DELTA]
    assert [e.payload["delta"] for e in deltas] == ["small "]
    # a payload that cannot be persisted is a local failure, not the model's
    [failed] = [e for e in store.read_events(run.run_id) if e.type == ev.MODEL_ATTEMPT_FAILED]
    assert failed.payload["failure_kind"] == "local"
    assert failed.payload["error_type"] == "LimitExceededError"
    async with await nd.DurableRuntime.open(
        store=store, agents=[agent], limits=nd.Limits(max_payload_bytes=10_000)
    ) as rt:
        again = await rt.get_run(run.run_id)
        await again.retry()
        assert (await again.result()).text == f"small {big} "
