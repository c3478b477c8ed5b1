"""Agents with MCP tools, for `nbdurable worker --agents mcp_agents:agents` subprocesses.

The HTTP test server's URL comes from MCP_TEST_URL. The tools are listed once
when the worker loads its agents (``tools_sync``); each worker opens its own
session to the server when a run first calls one.
"""

from __future__ import annotations

import os

import nbdurable as nd
from nbdurable.mcp import MCPServer
from nbdurable.runtime import Agent


def agents(url: str | None = None) -> list[Agent]:
    """The agents, on the server at ``url`` (default: MCP_TEST_URL)."""
    server = MCPServer.http(url or os.environ["MCP_TEST_URL"], timeout=30)

    def upsert_agent(agent_id: str, recovery: str) -> Agent:
        tools = server.tools_sync(
            include="upsert", approval={"upsert": False}, recovery={"upsert": recovery}
        )
        script = nd.ScriptedModel([nd.Turn.call("upsert", key="slow", value="v"), "stored"])
        return Agent(agent_id, script, tools, version="1")

    deleter = Agent(
        "mcp_delete",
        nd.ScriptedModel([nd.Turn.call("delete", key="k1"), "deleted"]),
        server.tools_sync(include="delete"),  # untrusted: approval, manual recovery
        version="1",
    )
    return [
        upsert_agent("mcp_upsert_idempotent", "idempotent"),
        upsert_agent("mcp_upsert_manual", "manual"),
        deleter,
    ]
