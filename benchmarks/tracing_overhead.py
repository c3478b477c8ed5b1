"""What tracing costs: loop calls with a tool, tracing off, on (no export), on (in-memory export).

Run: ``python benchmarks/tracing_overhead.py [--calls N]``. Each call is a
``generate_text`` with one tool call (two model calls, one tool, three spans and
the leg's) on an in-memory store; prints one markdown row per mode.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import nbdurable as nd
from nbdurable import tracing


@nd.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def calls(n: int) -> list[float]:
    store = nd.open_store("memory://")
    times = []
    for _ in range(n):
        model = nd.ScriptedModel([nd.Turn.call("add", a=1, b=2), "3"])
        began = time.perf_counter()
        await nd.generate_text(
            model=model, messages="1+2?", tools=[add], session=nd.DurableSession(store)
        )
        times.append((time.perf_counter() - began) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    n = parser.parse_args().calls
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    print("| tracing | calls | median ms/call | p95 ms/call |")
    print("|---|--:|--:|--:|")
    for mode in ("off", "on, no processor", "on, in-memory export"):
        tracing.uninstrument()
        if mode != "off":
            provider = TracerProvider()
            if mode == "on, in-memory export":
                provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
            nd.instrument(provider)
        asyncio.run(calls(min(n, 100)))  # warm up
        times = sorted(asyncio.run(calls(n)))
        p95 = times[int(len(times) * 0.95) - 1]
        print(f"| {mode} | {n} | {statistics.median(times):.3f} | {p95:.3f} |")
    tracing.uninstrument()


if __name__ == "__main__":
    main()
