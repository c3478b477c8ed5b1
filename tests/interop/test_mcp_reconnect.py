"""A streamable-HTTP MCP server that restarts forgets its sessions: the client opens a new
one, and sends a call again only when the server refused it unrun. Against the SDK's own
server (its session protocol) and the reference TypeScript server, with real restarts."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.mcp import MCPServer
from nbdurable.mcp._connection import Connection

from .conftest import HERE, HttpServer, free_port, log_lines
from .reference_server import EverythingServer, entry_point


def results(result: nd.GenerateTextResult) -> list[nd.ToolResultPart]:
    return [p for m in result.messages for p in m.content if isinstance(p, nd.ToolResultPart)]


async def call(tools: list[nd.Tool], name: str, **arguments: Any) -> nd.ToolResultPart:
    """One tool call through the real loop; its result part."""
    result = await nd.generate_text(
        model=nd.ScriptedModel([nd.Turn(tool_calls=[(name, arguments)]), "done"]),
        messages=[nd.user("go")],
        tools=tools,
        max_steps=5,
        approve_tool_call=lambda request: True,
    )
    (part,) = results(result)
    return part


async def parallel(tools: list[nd.Tool], *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """The calls in one model turn (run at once); their result parts."""
    result = await nd.generate_text(
        model=nd.ScriptedModel([nd.Turn(tool_calls=list(calls)), "done"]),
        messages=[nd.user("go")],
        tools=tools,
        max_steps=5,
        approve_tool_call=lambda request: True,
    )
    return results(result)


@pytest.fixture
def session_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    # The SDK's server keeps sessions in the handshake protocol; in the 2026 one it has none
    monkeypatch.setattr(Connection, "mode", "legacy")


@pytest.fixture
def everything() -> Iterator[EverythingServer]:
    server = EverythingServer(port=free_port(), script=entry_point())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.usefixtures("session_protocol")
async def test_the_sdks_server_restarted_gets_a_new_session_and_the_call_runs_once(
    http_server: HttpServer, mcp_log: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="mcp")
    server = MCPServer.http(http_server.url, trusted=True, timeout=10)
    try:
        tools = await server.tools(include="upsert")
        first = await call(tools, "upsert", key="a", value="1")
        assert not first.is_error
        http_server.stop()  # SIGKILL
        http_server.start()  # the same port, no sessions
        second = await call(tools, "upsert", key="b", value="2")
        assert not second.is_error, second.result
        assert second.result == "stored b=2"
        assert server.connection().opened == 2
        # refused unrun, then sent once on the new session: it ran once
        assert [line[2] for line in log_lines(mcp_log)] == ["a", "b"]
        third = await call(tools, "upsert", key="c", value="3")
        assert not third.is_error and server.connection().opened == 2
    finally:
        await server.close()
    # the forgotten session is not ended with a DELETE the server refuses (a warning)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.usefixtures("session_protocol")
async def test_parallel_calls_refused_by_a_restarted_server_each_run_once(
    http_server: HttpServer, mcp_log: Path
) -> None:
    server = MCPServer.http(http_server.url, trusted=True, timeout=10)
    try:
        tools = await server.tools(include="upsert")
        assert not (await call(tools, "upsert", key="a", value="1")).is_error
        http_server.stop()
        http_server.start()
        keys = ["p1", "p2", "p3", "p4"]
        out = await parallel(tools, *(("upsert", {"key": k, "value": "v"}) for k in keys))
        assert [part.is_error for part in out] == [False] * 4, [p.result for p in out]
        assert sorted(line[2] for line in log_lines(mcp_log)) == ["a", *keys]
        assert server.connection().opened <= 1 + len(keys)
    finally:
        await server.close()


async def test_the_reference_server_restarted_gets_a_new_session(
    everything: EverythingServer,
) -> None:
    server = MCPServer.http(everything.url, trusted=True, timeout=10)
    try:
        tools = await server.tools(include="echo")
        assert (await call(tools, "echo", message="before")).result == "Echo: before"
        everything.stop()
        everything.start()
        after = await call(tools, "echo", message="after")
        assert not after.is_error, after.result
        assert after.result == "Echo: after"
        assert server.connection().opened == 2
        # the listing also follows the new session
        assert "echo" in {t.name for t in await server.tools()}
        assert server.connection().opened == 2
    finally:
        await server.close()


@pytest.mark.usefixtures("session_protocol")
async def test_a_call_cut_by_the_restart_is_not_sent_again(
    http_server: HttpServer, mcp_log: Path, mcp_gate: Path
) -> None:
    server = MCPServer.http(http_server.url, trusted=True, timeout=10)
    try:
        tools = await server.tools(include="upsert")
        pending = asyncio.ensure_future(call(tools, "upsert", key="slow", value="1"))
        for _ in range(1000):  # the server took the call: it may have had its effect
            if log_lines(mcp_log):
                break
            await asyncio.sleep(0.01)
        http_server.stop()
        http_server.start()
        release(mcp_gate)
        cut = await pending
        assert cut.is_error and "MCPConnectionError" in str(cut.result)
        assert [line[2] for line in log_lines(mcp_log)] == ["slow"]  # never sent again
        after = await call(tools, "upsert", key="next", value="2")
        assert not after.is_error, after.result
        assert [line[2] for line in log_lines(mcp_log)] == ["slow", "next"]
    finally:
        await server.close()


async def test_a_server_that_stays_down_is_an_is_error_result(
    everything: EverythingServer,
) -> None:
    server = MCPServer.http(everything.url, trusted=True, timeout=5)
    try:
        tools = await server.tools(include="echo")
        everything.stop()
        started = time.monotonic()
        down = [await call(tools, "echo", message=str(i)) for i in range(3)]
        assert time.monotonic() - started < 10
        assert all(part.is_error for part in down)
        assert all("MCPConnectionError" in str(part.result) for part in down)
        # the cause is named, not an exception group's summary
        assert "All connection attempts failed" in str(down[-1].result)
        assert "TaskGroup" not in str(down[-1].result)
        assert server.connection().opened <= 3  # at most one new session per call
        everything.start()
        back = await call(tools, "echo", message="back")
        assert not back.is_error and back.result == "Echo: back"
    finally:
        await server.close()


@pytest.fixture
def refusing(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """refusing_server.py on 127.0.0.1: its URL and its log of handshakes."""
    log, port = tmp_path / "initialize.log", free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "refusing_server.py"), str(port), str(log)])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/mcp", log
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.usefixtures("session_protocol")
async def test_a_session_refused_again_is_reopened_once_per_call_not_in_a_loop(
    refusing: tuple[str, Path],
) -> None:
    url, log = refusing
    server = MCPServer.http(url, trusted=True, timeout=5)
    connection = server.connection()
    try:
        # the listing is refused, reopened once, refused again: a typed error
        with pytest.raises(nd.NbdurableError, match="no longer knows the session"):
            await connection.list_tools()
        assert connection.opened == 2 and len(log_lines(log)) == 2
        with pytest.raises(nd.NbdurableError, match="refused it too"):
            await connection.call("anything", {}, {})
        assert connection.opened == 4 and len(log_lines(log)) == 4
    finally:
        await server.close()


def release(gate: Path) -> None:
    """Let the server's slow upsert return."""
    gate.touch()
