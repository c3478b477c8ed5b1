"""Tracing on in a Temporal worker subprocess: its spans appended as JSON lines.

Given to `nbdurable worker --engine temporal` as a second ``--agents`` module:
importing it calls ``nbdurable.instrument()`` with a provider whose exporter
appends every finished span to the file NBDURABLE_TEST_SPANS names (as each
span ends: the worker exits with ``os._exit``, and may be SIGKILLed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import nbdurable as nd
from nbdurable.runtime import Agent
from support.tracing_harness import span_dicts


class JsonLinesExporter(SpanExporter):
    """Appends each span, as a JSON line, to a file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in span_dicts(spans):
                out.write(json.dumps(span) + "\n")
        return SpanExportResult.SUCCESS


def read_spans(path: Any) -> list[dict[str, Any]]:
    """The spans a worker wrote to ``path``."""
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


if os.environ.get("NBDURABLE_TEST_SPANS"):
    _provider = TracerProvider()
    _provider.add_span_processor(
        SimpleSpanProcessor(JsonLinesExporter(os.environ["NBDURABLE_TEST_SPANS"]))
    )
    nd.instrument(_provider)

agents = [Agent("traced-echo", nd.ScriptedModel(["ok"]), version="1")]
