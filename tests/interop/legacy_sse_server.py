"""An MCP server on the legacy HTTP+SSE transport only (the official SDK's ``sse``).

``python legacy_sse_server.py PORT``: serves ``GET /sse`` (the event stream that names
the POST endpoint) and ``POST /messages/`` on 127.0.0.1.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("legacy")


@server.tool()
def echo(text: str) -> str:
    """Echo the text."""
    return text


if __name__ == "__main__":
    server.run(transport="sse", host="127.0.0.1", port=int(sys.argv[1]))
