"""Check, in a real Arize Phoenix, that a run's chat spans show their input and output messages.

Phoenix pins versions the rest of the test environment does not share, so it goes in a
virtual environment of its own; this script (run with nbdurable's interpreter) starts it,
sends one traced run over OTLP/HTTP and reads the spans back through Phoenix's REST API::

    python -m venv /tmp/phoenix-venv
    /tmp/phoenix-venv/bin/pip install arize-phoenix
    pip install 'nbdurable[otel]' opentelemetry-exporter-otlp-proto-http
    python benchmarks/phoenix_check.py --phoenix /tmp/phoenix-venv/bin/phoenix

Phoenix maps the GenAI conventions' ``gen_ai.*`` attributes to its own
``llm.input_messages.*`` / ``llm.output_messages.*``: the check asserts those hold
the user's question, the assistant's tool call, the tool's result and the answer.
Exit status 0 when they do; the attributes it read are printed either way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import nbdurable as nd


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get_json(url: str) -> Any:
    """GET a URL's JSON."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def start_phoenix(executable: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``phoenix serve`` on free local ports; its base URL once it answers."""
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
    }
    log = (workdir / "phoenix.log").open("wb")
    process = subprocess.Popen([executable, "serve"], env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(
                f"phoenix exited ({process.returncode}); see {workdir / 'phoenix.log'}"
            )
        try:
            get_json(f"{base}/v1/projects")
            return process, base
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("phoenix did not answer within 180 s")


@nd.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def send_run(endpoint: str) -> str:
    """One traced run (a tool call, then an answer) exported to ``endpoint``; its trace id."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    nd.instrument(provider, capture_content=True)
    tracer = provider.get_tracer("phoenix_check")
    with tracer.start_as_current_span("phoenix_check") as root:
        result = asyncio.run(
            nd.generate_text(
                model=nd.ScriptedModel([nd.Turn.call("add", a=1, b=2), "It is 3."]),
                messages="What is 1+2?",
                tools=[add],
                instructions="Use the tool.",
                session=nd.DurableSession(nd.open_store("memory://")),
            )
        )
    provider.force_flush()
    assert result.text == "It is 3."
    return f"{root.get_span_context().trace_id:032x}"


def chat_spans(base: str, trace_id: str) -> list[dict[str, Any]]:
    """The trace's ``chat`` spans as Phoenix stored them (waits for ingestion)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        spans = get_json(f"{base}/v1/projects/default/spans?limit=100")["data"]
        chats = [
            s
            for s in spans
            if s["context"]["trace_id"] == trace_id and s["name"].startswith("chat")
        ]
        if len(chats) == 2:
            return sorted(chats, key=lambda s: s["start_time"])
        time.sleep(0.5)
    raise SystemExit("phoenix did not store the two chat spans within 30 s")


def check(chats: list[dict[str, Any]]) -> list[str]:
    """What Phoenix shows that it should not, or fails to show (empty: all is there)."""
    first, second = (c["attributes"] for c in chats)
    expected = {
        (0, "llm.input_messages.1.message.role"): "user",
        (0, "llm.input_messages.1.message.content"): "What is 1+2?",
        (0, "llm.output_messages.0.message.role"): "assistant",
        (0, "llm.output_messages.0.message.tool_calls.0.tool_call.function.name"): "add",
        (1, "llm.input_messages.3.message.role"): "tool",
        (1, "llm.input_messages.3.message.content"): "3",
        (1, "llm.output_messages.0.message.content"): "It is 3.",
    }
    problems = []
    for (index, key), value in expected.items():
        got = (first, second)[index].get(key)
        if got != value:
            problems.append(f"chat span {index + 1}: {key} is {got!r}, expected {value!r}")
    return problems


def main() -> int:
    """Start Phoenix, send a run, check what it shows; exit 1 on a difference."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phoenix", default=shutil.which("phoenix") or "phoenix")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phoenix-check-") as tmp:
        process, base = start_phoenix(args.phoenix, Path(tmp))
        try:
            trace_id = send_run(f"{base}/v1/traces")
            chats = chat_spans(base, trace_id)
        finally:
            process.terminate()
            process.wait(timeout=30)
    for index, chat in enumerate(chats, 1):
        print(f"chat span {index} ({chat['span_kind']}):")
        for key, value in sorted(chat["attributes"].items()):
            if key.startswith(("llm.input_messages", "llm.output_messages")):
                print(f"  {key} = {value}")
    problems = check(chats)
    for problem in problems:
        print("MISSING:", problem)
    print("phoenix check:", "FAILED" if problems else "ok: Phoenix shows input and output messages")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
