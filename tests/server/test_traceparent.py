"""A ``traceparent`` header on ``POST /runs`` makes the caller's span the run's parent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import nbdurable as nd
from nbdurable import tracing

from .harness import Server

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    nd.instrument(provider)
    try:
        yield exporter
    finally:
        tracing.uninstrument()


def test_the_header_becomes_the_parent_of_the_runs_spans(
    server: Server, exporter: InMemorySpanExporter
) -> None:
    with server.client() as http:
        response = http.post(
            "/runs",
            json={"agent": "helper", "prompt": "What is the answer?"},
            headers={"traceparent": TRACEPARENT, "tracestate": "vendor=1"},
        )
    assert response.status_code == 201, response.text
    run_id = response.json()["run_id"]
    server.wait_state(run_id, "completed")
    stored = server.record(run_id).trace_context
    assert stored["traceparent"] == TRACEPARENT and stored["tracestate"] == "vendor=1"
    [leg] = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert f"{leg.context.trace_id:032x}" == TRACE_ID
    assert leg.parent is not None and f"{leg.parent.span_id:016x}" == PARENT_ID
    assert leg.attributes is not None and leg.attributes["nbdurable.run_id"] == run_id


def test_the_header_is_stored_without_tracing_on_and_a_malformed_one_is_ignored(
    server: Server,
) -> None:
    with server.client() as http:
        good = http.post(
            "/runs",
            json={"agent": "helper", "prompt": "What is the answer?"},
            headers={"traceparent": TRACEPARENT},
        )
        bad = http.post(
            "/runs",
            json={"agent": "helper", "prompt": "What is the answer?"},
            headers={"traceparent": "not-a-trace"},
        )
    assert good.status_code == 201 and bad.status_code == 201
    assert server.record(good.json()["run_id"]).trace_context == {"traceparent": TRACEPARENT}
    assert server.record(bad.json()["run_id"]).trace_context is None
