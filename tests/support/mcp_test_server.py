"""An MCP server for the tests: the SDK's own server (``MCPServer``, formerly FastMCP).

    python mcp_test_server.py stdio
    python mcp_test_server.py http PORT      # streamable HTTP on 127.0.0.1:PORT/mcp

Tools that change something append a line to the file named by MCP_TEST_LOG
(O_APPEND, fsync'd), so tests count executions across processes:
``<tool> <idempotency key or -> <argument>``. ``upsert`` with key ``"slow"``
waits until the file named by MCP_TEST_GATE exists (a call to crash in).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

IDEMPOTENCY_META_KEY = "nbdurable/idempotencyKey"

server = MCPServer("nbdurable-test-server")


def _log(line: str) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _key(ctx: Context[Any, Any]) -> str:
    meta = ctx.request_context.meta or {}
    return str(meta.get(IDEMPOTENCY_META_KEY, "-"))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def server_pid() -> int:
    """The server process's id."""
    return os.getpid()


@server.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def environment(name: str) -> str:
    """An environment variable of the server process."""
    return os.environ.get(name, "")


@server.tool(annotations=ToolAnnotations(read_only_hint=True), structured_output=False)
def whoami(ctx: Context[Any, Any]) -> str:
    """The X-Test-User header of the HTTP request."""
    headers = ctx.headers or {}
    return {k.lower(): v for k, v in headers.items()}.get("x-test-user", "")


@server.tool(
    annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True),
    structured_output=False,
)
def upsert(key: str, value: str, ctx: Context[Any, Any]) -> str:
    """Store a value under a key."""
    _log(f"upsert {_key(ctx)} {key}")
    if key == "slow":
        gate = os.environ.get("MCP_TEST_GATE", "")
        while gate and not os.path.exists(gate):
            time.sleep(0.02)
    return f"stored {key}={value}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete(key: str, ctx: Context[Any, Any]) -> str:
    """Delete a key."""
    _log(f"delete {_key(ctx)} {key}")
    return f"deleted {key}"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def append_note(note: str, ctx: Context[Any, Any]) -> str:
    """Append a note (neither destructive nor idempotent)."""
    _log(f"append_note {_key(ctx)} {note}")
    return "noted"


@server.tool()
def refuse(reason: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(reason)


@server.tool()
def crash() -> str:
    """Kill the server process in the middle of the call."""
    os._exit(3)


@server.tool(structured_output=False)
def pictures() -> list[Any]:
    """Two content blocks: a text and an image."""
    from mcp.server.mcpserver.utilities.types import Image

    return ["a red dot", Image(data=b"\x89PNG\r\n\x1a\n", format="png")]


@server.tool()
async def enable_extra(ctx: Context[Any, Any]) -> str:
    """Add the tool `extra` and announce the change."""

    def extra(x: int) -> int:
        """Ten times x."""
        return 10 * x

    server.add_tool(extra, annotations=ToolAnnotations(read_only_hint=True))
    await ctx.notify_tools_changed()  # to subscribed clients of the 2026 protocol
    await ctx.session.send_tool_list_changed()  # on the session, for earlier protocols
    return "extra enabled"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        uvicorn.run(
            server.streamable_http_app(),
            host="127.0.0.1",
            port=int(sys.argv[2]),
            log_level="warning",
        )
