"""Tools of MCP servers as nbdurable tools (extra ``mcp``: the official ``mcp`` SDK, 2.x).

.. code-block:: python

    from nbdurable.mcp import MCPServer

    files = MCPServer.stdio("npx", args=["-y", "@modelcontextprotocol/server-filesystem", "."])
    tools = await files.tools(approval={"read_*": False}, recovery={"read_*": "safe"})

An :class:`MCPServer` describes how to reach a server; the session is opened on
the first call, one per server in each ``DurableRuntime`` (closed with it, a
stdio server's process stopped and reaped) or, outside a runtime, one per
event loop, and opened again after the server crashed, the connection broke,
or a restarted HTTP server no longer knows it (a call that server refused unrun
is then sent once more; see :mod:`nbdurable.mcp._connection`).

Approval and recovery: every tool of an untrusted server (the default) needs
approval and has ``manual`` recovery; a trusted server's tool annotations set
them (see :mod:`nbdurable.mcp._policy`), and ``approval=`` / ``recovery=``
settings by name or glob pattern win over both. An error the tool reports, or a
connection that breaks during the call, is an ``is_error`` result the model
reads. Each call carries its idempotency key in the request's ``_meta`` under
``"nbdurable/idempotencyKey"`` (the same when a crash makes the call run again).

Importing this module does not import the SDK; it is imported when a server is
first reached.
"""

from ._connection import MCPConnectionError
from ._results import MCPToolError
from ._server import IDEMPOTENCY_META_KEY, MCPServer

__all__ = ["IDEMPOTENCY_META_KEY", "MCPConnectionError", "MCPServer", "MCPToolError"]
