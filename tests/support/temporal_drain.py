"""Agents for draining Temporal workers: a step whose calls run one after the other.

``drain_pair`` asks for two ``long_safe`` calls in one step, run in order
(``max_tool_concurrency=1``) inside the ``model_step`` activity; a worker told
to drain during the first must not start the second. ``drain_then_manual``
runs a ``long_safe`` call, then a ``long_manual`` one in its next step. The
tools log their starts and ends (support.drain_agents).
"""

from __future__ import annotations

import nbdurable as nd
from nbdurable.runtime import Agent
from support.drain_agents import long_manual, long_safe

agents = [
    Agent(
        "drain_pair",
        nd.ScriptedModel(
            [nd.Turn(tool_calls=[("long_safe", {"n": 1}), ("long_safe", {"n": 2})]), "both done"]
        ),
        [long_safe],
        version="1",
        tool_recovery={"long_safe": "safe"},
        max_tool_concurrency=1,
    ),
    Agent(
        "drain_then_manual",
        nd.ScriptedModel(
            [nd.Turn.call("long_safe", n=1), nd.Turn.call("long_manual", n=2), "settled"]
        ),
        [long_safe, long_manual],
        version="1",
        tool_recovery={"long_safe": "safe", "long_manual": "manual"},
    ),
]
