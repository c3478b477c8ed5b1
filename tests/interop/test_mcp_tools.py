"""MCP servers' tools in a run: listing, calling, errors, policies and list changes, against
the SDK's own server over stdio and over streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.mcp import IDEMPOTENCY_META_KEY, MCPServer
from nbdurable.mcp._connection import Connection

from .conftest import SERVER_SCRIPT, HttpServer, log_lines, stdio


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest, mcp_log: Path, mcp_gate: Path) -> MCPServer:
    """The same test server over both transports, trusted so reads run without approval."""
    if request.param == "stdio":
        return stdio(mcp_log, mcp_gate, trusted=True)
    http: HttpServer = request.getfixturevalue("http_server")
    return MCPServer.http(http.url, trusted=True, headers={"X-Test-User": "ada"})


def results(result: nd.GenerateTextResult) -> list[nd.ToolResultPart]:
    return [p for m in result.messages for p in m.content if isinstance(p, nd.ToolResultPart)]


async def run_calls(tools: list[nd.Tool], *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """One model turn per call, through the real loop (gated calls approved); the results."""
    script: list[Any] = [nd.Turn(tool_calls=[call]) for call in calls] + ["done"]
    result = await nd.generate_text(
        model=nd.ScriptedModel(script),
        messages=[nd.user("go")],
        tools=tools,
        max_steps=10,
        approve_tool_call=lambda request: True,
    )
    assert result.status == "completed"
    return results(result)


async def test_tools_are_listed_with_the_servers_schemas(server: MCPServer) -> None:
    try:
        tools = {t.name: t for t in await server.tools()}
        assert {"add", "upsert", "delete", "refuse", "crash", "enable_extra"} <= set(tools)
        add = tools["add"]
        assert add.description == "Add two integers."
        assert add.parameters["properties"]["a"]["type"] == "integer"
        assert add.parameters["required"] == ["a", "b"]
    finally:
        await server.close()


async def test_calls_return_the_servers_results(server: MCPServer, mcp_log: Path) -> None:
    try:
        tools = await server.tools()
        out = await run_calls(
            tools, ("add", {"a": 2, "b": 3}), ("upsert", {"key": "k", "value": "v"})
        )
        assert [r.is_error for r in out] == [False, False]
        assert out[0].result == {"result": 5}  # the server's structured content
        assert out[1].result == "stored k=v"
        # the call carried its idempotency key in _meta (no run id: the tool call id alone)
        assert log_lines(mcp_log) == [["upsert", out[1].tool_call_id, "k"]]
    finally:
        await server.close()


async def test_tool_errors_and_invalid_arguments_become_is_error_results(
    server: MCPServer, mcp_log: Path
) -> None:
    try:
        tools = await server.tools()
        out = await run_calls(
            tools,
            ("refuse", {"reason": "the table is locked"}),
            ("upsert", {"key": "k"}),  # value missing: refused before the server sees it
            ("add", {"a": 1, "b": 1}),
        )
        assert out[0].is_error and "the table is locked" in str(out[0].result)
        assert out[1].is_error and "value: a required property is missing" in str(out[1].result)
        assert not out[2].is_error and out[2].result == {"result": 2}
        assert log_lines(mcp_log) == []
    finally:
        await server.close()


async def test_mixed_content_comes_back_as_blocks(server: MCPServer) -> None:
    try:
        (out,) = await run_calls(await server.tools(include="pictures"), ("pictures", {}))
        assert out.result[0] == {"type": "text", "text": "a red dot"}
        assert out.result[1]["type"] == "image" and out.result[1]["mimeType"] == "image/png"
    finally:
        await server.close()


async def test_http_headers_reach_the_server(http_server: HttpServer) -> None:
    server = MCPServer.http(http_server.url, headers={"X-Test-User": "ada"}, trusted=True)
    try:
        (out,) = await run_calls(await server.tools(include="whoami"), ("whoami", {}))
        assert out.result == "ada"
        assert "ada" not in repr(server)  # header values may be secrets
    finally:
        await server.close()


async def test_stdio_env_reaches_the_server(stdio_server: MCPServer) -> None:
    try:
        tool = (await stdio_server.tools(include="environment", approval={"environment": False}))[0]
        (out,) = await run_calls([tool], ("environment", {"name": "MCP_TEST_TAG"}))
        assert out.result == "from-env"
        assert "from-env" not in repr(stdio_server)
    finally:
        await stdio_server.close()


async def test_untrusted_server_every_tool_needs_approval_with_manual_recovery(
    stdio_server: MCPServer,
) -> None:
    try:
        tools = await stdio_server.tools()
        assert {(t.needs_approval, t.recovery) for t in tools} == {(True, "manual")}
    finally:
        await stdio_server.close()


async def test_trusted_server_policies_follow_the_annotations(
    mcp_log: Path, mcp_gate: Path
) -> None:
    server = stdio(mcp_log, mcp_gate, trusted=True)
    try:
        tools = {t.name: (t.needs_approval, t.recovery) for t in await server.tools()}
        assert tools["add"] == (False, "safe")  # readOnlyHint
        assert tools["upsert"] == (False, "idempotent")  # not destructive, idempotentHint
        assert tools["delete"] == (True, "manual")  # destructiveHint
        assert tools["append_note"] == (False, "manual")  # not destructive, not idempotent
        assert tools["refuse"] == (True, "manual")  # no annotations: the spec's defaults
    finally:
        await server.close()


async def test_explicit_settings_win_over_annotations_exact_names_over_patterns(
    mcp_log: Path, mcp_gate: Path
) -> None:
    server = stdio(mcp_log, mcp_gate, trusted=True)

    def big(args: dict[str, Any]) -> bool:
        return args.get("a", 0) > 100

    try:
        tools = {
            t.name: t
            for t in await server.tools(
                approval={"add": big, "*": True, "delete": False},
                recovery={"de*": "idempotent", "upsert": "manual"},
                include=["add", "upsert", "de*"],
            )
        }
        assert set(tools) == {"add", "upsert", "delete"}
        assert tools["add"].needs_approval is big and tools["add"].recovery == "safe"
        assert (tools["upsert"].needs_approval, tools["upsert"].recovery) == (True, "manual")
        assert (tools["delete"].needs_approval, tools["delete"].recovery) == (False, "idempotent")
        assert await tools["add"].requires_approval({"a": 500, "b": 1})
        assert not await tools["add"].requires_approval({"a": 5, "b": 1})
    finally:
        await server.close()


async def test_settings_naming_unknown_tools_or_policies_are_refused(
    stdio_server: MCPServer,
) -> None:
    try:
        with pytest.raises(nd.ConfigurationError, match=r"'ad'.*does not list"):
            await stdio_server.tools(approval={"ad": False})
        with pytest.raises(nd.ConfigurationError, match="'sometimes'"):
            await stdio_server.tools(recovery={"add": "sometimes"})
        with pytest.raises(nd.ConfigurationError, match="True, False or a callable"):
            await stdio_server.tools(approval={"add": "no"})  # type: ignore[dict-item]
        assert await stdio_server.tools(include="no_such_*") == []  # a pattern may match none
        with pytest.raises(nd.ConfigurationError, match="another prefix="):
            await stdio_server.tools(prefix="my tools/")
    finally:
        await stdio_server.close()


async def test_prefix_keeps_servers_apart_and_calls_use_the_servers_names(
    server: MCPServer,
) -> None:
    try:
        tools = await server.tools(prefix="calc.", include="add")
        assert [t.name for t in tools] == ["calc.add"]
        (out,) = await run_calls(tools, ("calc.add", {"a": 4, "b": 4}))
        assert out.result == {"result": 8}
    finally:
        await server.close()


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_the_tool_list_follows_tools_list_changed(
    server: MCPServer, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the 2026 protocol announces changes on a subscription, earlier ones on the session
    monkeypatch.setattr(Connection, "mode", protocol)
    try:
        first = {t.name for t in await server.tools()}
        assert "extra" not in first
        assert {t.name for t in await server.tools()} == first  # unchanged: no new listing
        tools = await server.tools()
        await run_calls(tools, ("enable_extra", {}))
        connection = server.connection()
        for _ in range(200):  # the notification arrives on its own stream
            if connection._listing_stale:
                break
            await asyncio.sleep(0.01)
        now = {t.name: t for t in await server.tools()}
        assert set(now) == first | {"extra"}
        (out,) = await run_calls([now["extra"]], ("extra", {"x": 4}))
        assert out.result == {"result": 40}
    finally:
        await server.close()


async def test_a_server_that_crashes_mid_call_gives_is_error_and_the_next_call_reconnects(
    mcp_log: Path, mcp_gate: Path
) -> None:
    server = stdio(mcp_log, mcp_gate, trusted=True)
    try:
        tools = await server.tools()
        first_pid = (await run_calls(tools, ("server_pid", {})))[0].result["result"]
        out = await run_calls(tools, ("crash", {}), ("server_pid", {}))
        assert out[0].is_error and "connection" in str(out[0].result)
        assert not out[1].is_error
        second_pid = out[1].result["result"]
        assert second_pid != first_pid
        assert server.connection().opened == 2
    finally:
        await server.close()


async def test_a_server_that_died_while_idle_is_reopened_before_the_next_call(
    mcp_log: Path, mcp_gate: Path
) -> None:
    server = stdio(mcp_log, mcp_gate, trusted=True)
    try:
        tools = await server.tools()
        pid = (await run_calls(tools, ("server_pid", {})))[0].result["result"]
        os.kill(pid, signal.SIGKILL)
        connection = server.connection()
        for _ in range(500):  # the session notices the end of its transport
            if not connection._usable():
                break
            await asyncio.sleep(0.01)
        (out,) = await run_calls(tools, ("add", {"a": 1, "b": 2}))
        assert not out.is_error and out.result == {"result": 3}
    finally:
        await server.close()


async def test_an_unreachable_server_is_a_typed_error_and_an_is_error_result(
    http_server: HttpServer,
) -> None:
    from nbdurable.mcp import MCPConnectionError

    server = MCPServer.http(http_server.url, trusted=True, timeout=5)
    try:
        tools = await server.tools(include="add")
        await server.close()
        http_server.stop()
        (out,) = await run_calls(tools, ("add", {"a": 1, "b": 2}))
        assert out.is_error and "MCPConnectionError" in str(out.result)
        with pytest.raises(MCPConnectionError):
            await server.tools()
        assert isinstance(MCPConnectionError("x"), nd.NbdurableError)
    finally:
        await server.close()


def test_descriptions_are_checked_and_hide_secrets() -> None:
    with pytest.raises(nd.ConfigurationError, match="http"):
        MCPServer.http("ftp://example.org")
    with pytest.raises(nd.ConfigurationError, match="list of arguments"):
        MCPServer.stdio(sys.executable, args=SERVER_SCRIPT)  # type: ignore[arg-type]
    with pytest.raises(nd.ConfigurationError, match="timeout"):
        MCPServer.stdio(sys.executable, timeout=0)
    server = MCPServer.http("http://127.0.0.1:1/mcp", headers={"Authorization": "Bearer s3cret"})
    assert "s3cret" not in repr(server) and "Authorization" in repr(server)
    assert MCPServer.stdio("x", env={"A": "1"}) == MCPServer.stdio("x", env={"A": "1"})
    assert IDEMPOTENCY_META_KEY == "nbdurable/idempotencyKey"


def test_tools_sync_lists_without_a_running_loop(stdio_server: MCPServer) -> None:
    tools = stdio_server.tools_sync(include=["add", "delete"])
    assert sorted(t.name for t in tools) == ["add", "delete"]


async def test_tools_sync_inside_a_running_loop(stdio_server: MCPServer) -> None:
    tools = stdio_server.tools_sync(include="add")
    assert [t.name for t in tools] == ["add"]
    assert stdio_server.connection().opened == 0  # its own connection, already closed
