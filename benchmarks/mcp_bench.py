"""What an MCP tool costs in nbdurable: opening a session and each call, against the raw SDK.

    python benchmarks/mcp_bench.py              # 300 calls per transport
    python benchmarks/mcp_bench.py --calls 50   # quicker

For each transport (stdio: the server a child process; streamable HTTP: a
uvicorn process on 127.0.0.1) it measures, against the test suite's server
(tests/support/mcp_test_server.py, the SDK's own ``MCPServer``):

- open: the first ``await server.tools()`` (spawn or connect, handshake, subscribe, list);
- raw call: ``mcp.Client.call_tool("add")`` on an open session (the SDK alone);
- tool call: the same call through the nbdurable tool (``Tool.invoke``: argument
  check, ``_meta`` with the idempotency key, result conversion);
- run step: one step of ``generate_text`` with a ``ScriptedModel`` calling the tool.

Medians and 95th percentiles in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nbdurable as nd
from nbdurable.mcp import MCPServer
from nbdurable.tools import ToolContext

ROOT = Path(__file__).resolve().parent.parent
SERVER = str(ROOT / "tests" / "support" / "mcp_test_server.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_http(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, SERVER, "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.05)


async def timed(n: int, call: Callable[[int], Awaitable[Any]]) -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        await call(i)
        times.append((time.perf_counter() - start) * 1000)
    return times


def summary(times: list[float]) -> str:
    p95 = statistics.quantiles(times, n=20)[18] if len(times) >= 20 else max(times)
    return f"{statistics.median(times):8.2f} {p95:8.2f}"


async def bench(name: str, server: MCPServer, calls: int) -> list[str]:
    start = time.perf_counter()
    tools = {t.name: t for t in await server.tools()}
    open_ms = (time.perf_counter() - start) * 1000
    add = tools["add"]
    client = await server.connection().client()

    async def raw(i: int) -> Any:
        return await client.call_tool("add", {"a": i, "b": 1})

    async def tool(i: int) -> Any:
        context = ToolContext(tool_call_id=f"c{i}", tool_name="add", run_id="bench")
        return await add.invoke(add.validate_args({"a": i, "b": 1}), context)

    async def step(i: int) -> Any:
        model = nd.ScriptedModel([nd.Turn.call("add", a=i, b=1), "done"])
        result = await nd.generate_text(model=model, messages=[nd.user("add")], tools=[add])
        assert result.status == "completed"

    await timed(10, raw)  # warm-up
    rows = [f"{name:6} open {open_ms:10.1f}"]
    for label, fn in (("raw call", raw), ("tool call", tool), ("run step", step)):
        rows.append(f"{name:6} {label:10} {summary(await timed(calls, fn))}")
    await server.close()
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {args.calls} calls each")
    print(f"{'':6} {'what':10} {'median':>8} {'p95':>8}   (ms)")
    stdio = MCPServer.stdio(sys.executable, args=[SERVER, "stdio"], trusted=True)
    for row in await bench("stdio", stdio, args.calls):
        print(row)
    port = free_port()
    proc = start_http(port)
    try:
        http = MCPServer.http(f"http://127.0.0.1:{port}/mcp", trusted=True)
        for row in await bench("http", http, args.calls):
            print(row)
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    asyncio.run(main())
