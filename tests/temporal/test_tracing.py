"""Traces on Temporal: the SDK's spans and nbdurable's, one trace across the run's legs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.temporal_traced import read_spans
from support.tracing_harness import span_dicts

import nbdurable as nd
from nbdurable import tracing

from .conftest import Cluster

TRACED = ["--agents", "support.temporal_traced:agents"]


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    nd.instrument(provider)
    try:
        yield provider, exporter
    finally:
        tracing.uninstrument()


def named(spans: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"].startswith(prefix)]


async def _approve_and_finish(cluster: Cluster, submit_under: Any = None) -> str:
    async with cluster.runtime(heartbeat_timeout=2) as rt:
        if submit_under is None:
            run = await rt.submit("janitor", "Clean up stale staging tables.")
        else:
            with submit_under:
                run = await rt.submit("janitor", "Clean up stale staging tables.")
        await asyncio.wait_for(run.wait("waiting_approval"), 30)
        await run.approve()
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Done: dropped stg_2023."
        return run.run_id


def _legs_and_children(spans: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two legs' invoke_agent spans; asserts every chat / execute_tool is a leg's child."""
    first, second = sorted(
        named(spans, "invoke_agent janitor"), key=lambda s: s["attributes"]["nbdurable.step_index"]
    )
    children: dict[str, list[str]] = {first["span_id"]: [], second["span_id"]: []}
    for span in named(spans, "chat ") + named(spans, "execute_tool "):
        assert span["parent_id"] in children, span
        children[span["parent_id"]].append(span["name"])
    assert sorted(children[first["span_id"]]) == [
        "chat scripted",
        "chat scripted",
        "execute_tool step",
    ]
    assert sorted(children[second["span_id"]]) == [
        "chat scripted",
        "chat scripted",
        "execute_tool drop_table",
        "execute_tool step",
    ]
    assert first["attributes"]["nbdurable.status"] == "suspended"
    assert [e["name"] for e in first["events"]] == ["nbdurable.approval.wait"]
    assert first["events"][0]["attributes"]["gen_ai.tool.name"] == "drop_table"
    assert second["attributes"]["nbdurable.status"] == "completed"
    assert second["attributes"]["nbdurable.resumed"] is True
    assert [e["name"] for e in second["events"]] == ["nbdurable.approval.answered"]
    assert second["links"] == [first["span_id"]]
    for leg in (first, second):
        assert leg["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        assert leg["attributes"]["gen_ai.agent.name"] == "janitor"
        assert leg["attributes"]["gen_ai.usage.output_tokens"] >= 1
    return first, second


async def test_a_run_with_a_tool_and_an_approval_is_one_trace_with_the_sdk_spans(
    cluster: Cluster, traced: Any, tmp_path: Path
) -> None:
    provider, exporter = traced
    spans_file = tmp_path / "worker-spans.jsonl"
    worker = cluster.worker(args=TRACED, NBDURABLE_TEST_SPANS=str(spans_file))
    cell = provider.get_tracer("notebook").start_as_current_span("notebook cell")
    run_id = await _approve_and_finish(cluster, submit_under=cell)
    worker.stop()  # every span it began has ended and is written
    client = span_dicts(exporter.get_finished_spans())
    spans = client + read_spans(spans_file)
    [root] = named(client, "notebook cell")
    assert {s["trace_id"] for s in spans} == {root["trace_id"]}
    first, second = _legs_and_children(spans)
    assert first["parent_id"] == second["parent_id"] == root["span_id"]
    assert first["attributes"]["nbdurable.run_id"] == run_id
    # the SDK's own spans: the client's start, the workflow's, the activities'
    # (one signal-with-start per leg: the submission, then the approval)
    starts = named(client, "SignalWithStartWorkflow:nbdurable.AgentRun")
    assert len(starts) == 2 and {s["parent_id"] for s in starts} == {root["span_id"]}
    [workflow] = named(spans, "RunWorkflow:nbdurable.AgentRun")
    assert workflow["parent_id"] in {s["span_id"] for s in starts}
    # a step's model call and its safe calls are one activity; the approved call its own
    assert len(named(spans, "RunActivity:nbdurable.model_step")) == 4
    assert len(named(spans, "RunActivity:nbdurable.run_tool")) == 1
    assert len(named(spans, "execute_tool step")) == 2
    stored = cluster.reader().runtime_store.rt_get(run_id)
    assert stored is not None and stored.trace_context is not None
    assert stored.trace_context[tracing.LEG_KEY].split("-")[2] == second["span_id"]


async def test_a_run_submitted_untraced_gets_the_trace_of_its_first_leg(
    cluster: Cluster, tmp_path: Path
) -> None:
    spans_file = tmp_path / "worker-spans.jsonl"
    worker = cluster.worker(args=TRACED, NBDURABLE_TEST_SPANS=str(spans_file))
    await _approve_and_finish(cluster)
    worker.stop()
    spans = read_spans(spans_file)
    first, second = _legs_and_children(spans)
    # no client span: the first leg's activity span (the SDK's) starts the trace
    [begin] = [s for s in spans if s["span_id"] == first["parent_id"]]
    assert begin["name"] == "RunActivity:nbdurable.begin_leg" and begin["parent_id"] is None
    assert second["parent_id"] == first["span_id"]
    assert first["trace_id"] == second["trace_id"]
    assert {s["trace_id"] for s in named(spans, "chat ")} == {first["trace_id"]}


async def test_a_sub_agents_calls_are_children_of_the_runs_leg(
    cluster: Cluster, tmp_path: Path
) -> None:
    spans_file = tmp_path / "worker-spans.jsonl"
    worker = cluster.worker(args=TRACED, NBDURABLE_TEST_SPANS=str(spans_file))
    async with cluster.runtime(heartbeat_timeout=2) as rt:
        run = await rt.submit("foreman", "Get the crew going.")
        await asyncio.wait_for(run.result(), 30)
    worker.stop()
    spans = read_spans(spans_file)
    [leg] = named(spans, "invoke_agent")
    calls = named(spans, "chat ") + named(spans, "execute_tool ")
    assert len(named(spans, "execute_tool ")) >= 2  # the sub-agent's own tools ran
    assert {s["parent_id"] for s in calls} == {leg["span_id"]}
    assert {s["trace_id"] for s in calls} == {leg["trace_id"]}
