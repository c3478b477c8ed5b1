"""MCP test servers: the SDK's own server over stdio (a child of the client) and over
streamable HTTP (a uvicorn process on 127.0.0.1, stopped by PID after the test).

Tools that change something log to ``mcp_log`` (``<tool> <idempotency key> <arg>``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nbdurable.mcp import MCPServer

HERE = Path(__file__).resolve().parent
SERVER_SCRIPT = str(HERE.parent / "support" / "mcp_test_server.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_lines(path: Path) -> list[list[str]]:
    """The server's log as split lines (empty when nothing was logged)."""
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


@dataclass
class HttpServer:
    """A streamable-HTTP MCP server process."""

    port: int
    log: Path
    gate: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        env = {**os.environ, "MCP_TEST_LOG": str(self.log), "MCP_TEST_GATE": str(self.gate)}
        self.proc = subprocess.Popen(
            [sys.executable, SERVER_SCRIPT, "http", str(self.port)],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the MCP test server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def mcp_log(tmp_path: Path) -> Path:
    return tmp_path / "mcp-calls.log"


@pytest.fixture
def mcp_gate(tmp_path: Path) -> Path:
    return tmp_path / "gate"


@pytest.fixture
def stdio_server(mcp_log: Path, mcp_gate: Path) -> MCPServer:
    """An untrusted stdio server (each session starts its own child process)."""
    return stdio(mcp_log, mcp_gate)


def stdio(log: Path, gate: Path, *, trusted: bool = False, **options: object) -> MCPServer:
    env = {"MCP_TEST_LOG": str(log), "MCP_TEST_GATE": str(gate), "MCP_TEST_TAG": "from-env"}
    return MCPServer.stdio(
        sys.executable, args=[SERVER_SCRIPT, "stdio"], env=env, trusted=trusted, **options
    )


@pytest.fixture
def http_server(mcp_log: Path, mcp_gate: Path) -> Iterator[HttpServer]:
    server = HttpServer(port=free_port(), log=mcp_log, gate=mcp_gate)
    server.start()
    try:
        yield server
    finally:
        server.stop()
