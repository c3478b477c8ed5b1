"""A server that speaks only MCP's legacy HTTP+SSE transport gets an error saying so and what to do."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.tiers import skip_without

from nbdurable.mcp import MCPConnectionError, MCPServer

skip_without("mcp")  # found, not imported: its server runs in a process of its own

HERE = Path(__file__).resolve().parent


@pytest.fixture
def legacy_url() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(HERE / "legacy_sse_server.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/sse"
    finally:
        process.terminate()
        process.wait(10)


async def test_a_legacy_sse_server_is_named_with_what_to_do(legacy_url: str) -> None:
    with pytest.raises(MCPConnectionError) as caught:
        await MCPServer.http(legacy_url).tools()
    message = str(caught.value)
    assert "legacy HTTP+SSE transport" in message
    assert "streamable HTTP" in message
    assert f"'mcp-proxy', {legacy_url!r}" in message
    assert "TaskGroup" not in message


async def test_a_server_that_is_not_there_is_not_called_legacy() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(MCPConnectionError) as caught:
        await MCPServer.http(f"http://127.0.0.1:{port}/mcp").tools()
    assert "legacy" not in str(caught.value)
