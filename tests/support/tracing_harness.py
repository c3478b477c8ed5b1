"""An agent with an approval, spans as JSON, and the resume leg run in another process.

Also what traced worker subprocesses share: :class:`JsonLinesExporter` (each
finished span appended to a file) and :func:`instrument_from_env`.

``python tests/support/tracing_harness.py STORE_URL OUT.json`` opens a runtime on the
store, approves every pending approval, waits for the runs to finish and writes
the spans it exported (in-memory) to OUT.json.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a warehouse table."""
    return f"dropped {name}"


@nd.tool
def list_tables(prefix: str) -> list[str]:
    """List the tables whose names start with a prefix."""
    return [f"{prefix}_2024", f"{prefix}_2025"]


def janitor() -> Agent:
    """Lists tables, then drops one (gated), then answers."""
    return Agent(
        "janitor",
        nd.ScriptedModel(
            [
                nd.Turn.call("list_tables", prefix="stg"),
                nd.Turn.call("drop_table", name="stg_2024"),
                "Dropped stg_2024.",
            ]
        ),
        [list_tables, drop_table],
        version="1",
    )


def span_dicts(spans: Any) -> list[dict[str, Any]]:
    """Finished SDK spans as plain dicts (ids in hex, as W3C writes them)."""
    out = []
    for span in spans:
        out.append(
            {
                "name": span.name,
                "trace_id": f"{span.context.trace_id:032x}",
                "span_id": f"{span.context.span_id:016x}",
                "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
                "kind": span.kind.name,
                "attributes": {k: _plain(v) for k, v in (span.attributes or {}).items()},
                "events": [
                    {"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events
                ],
                "links": [f"{link.context.span_id:016x}" for link in span.links],
                "status": span.status.status_code.name,
            }
        )
    return out


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


class JsonLinesExporter(SpanExporter):
    """Appends each finished span, as a JSON line, to a file (it survives a SIGKILL)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            for span in span_dicts(spans):
                out.write(json.dumps(span) + "\n")
        return SpanExportResult.SUCCESS


def read_spans(path: Any) -> list[dict[str, Any]]:
    """The spans a process wrote to ``path`` (none when it wrote no file)."""
    if not Path(path).exists():
        return []
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def instrument_from_env(variable: str = "NBDURABLE_TEST_SPANS") -> None:
    """Turn tracing on, each span appended to the file ``variable`` names, when it is set."""
    path = os.environ.get(variable)
    if not path:
        return
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(path)))
    nd.instrument(provider)


async def _resume(url: str) -> None:
    async with await DurableRuntime.open(store=nd.open_store(url), agents=[janitor()]) as rt:
        for record in rt.list_runs("waiting_approval"):
            run = await rt.get_run(record.run_id)
            for request in await run.pending_approvals():
                await run.approve(request.approval_id)
            await run.result()


def main() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    url, out = sys.argv[1], Path(sys.argv[2])
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    nd.instrument(provider)
    asyncio.run(_resume(url))
    out.write_text(json.dumps(span_dicts(exporter.get_finished_spans())))


if __name__ == "__main__":
    main()
