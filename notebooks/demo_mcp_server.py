"""A small MCP server for notebook 08: a pretend warehouse, served over stdio.

It is the official MCP SDK's own server (``MCPServer``, formerly FastMCP). The
notebook starts it as a child process with ``MCPServer.stdio(sys.executable,
args=["demo_mcp_server.py"], trusted=True)``; in real use the command is your
server's executable, ``npx ...`` or ``uvx ...``.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("warehouse")
tables = {"stg_2023": 0, "stg_2024": 1200, "orders": 98_000}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_tables() -> dict[str, int]:
    """Every warehouse table with its row count."""
    return dict(tables)


@server.tool(annotations=ToolAnnotations(destructive_hint=True), structured_output=False)
def drop_table(name: str) -> str:
    """Drop a warehouse table."""
    if tables.pop(name, None) is None:
        raise ValueError(f"no table {name!r}")
    return f"dropped {name}"


if __name__ == "__main__":
    server.run("stdio")
