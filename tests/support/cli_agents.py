"""Agents the CLI tests run, and hand to ``--agents support.cli_agents:agents``.

``agents`` is a factory: every runtime (the fixture's, each command's) gets fresh
instances of the same definitions.
"""

from __future__ import annotations

import nbdurable as nd
from nbdurable.models._base import ModelRequest

FLAKY = {"fail": True}
"""While true, the ``flaky`` agent's model raises (a test flips it before ``retry``)."""


@nd.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key} = 42"


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a warehouse table."""
    return f"dropped {name}"


@nd.tool(needs_approval=True, allow_edit=True)
def edit_table(name: str, cascade: bool = False) -> str:
    """Drop a warehouse table (the approver may edit which one first)."""
    return f"dropped {name}{' with cascade' if cascade else ''}"


def _after_drop(request: ModelRequest) -> str:
    result = request.messages[-1].tool_results[0]
    return f"Kept it: {result.result}" if result.is_error else f"Done: {result.result}."


def _flaky(request: ModelRequest) -> str:
    if FLAKY["fail"]:
        raise nd.ModelError("the model is down")
    return "Back up."


def agents() -> list[nd.Agent]:
    """Fresh instances of every test agent."""
    return make_agents()


def make_agents(table: str = "stg_2024", saying: str = "Dropping stg_2024.") -> list[nd.Agent]:
    """Fresh instances of every test agent; the janitor drops ``table``.

    The HTTP bridge's tests serve the same agents (tests/server/agents.py).
    """
    return [
        nd.Agent(
            "helper",
            nd.ScriptedModel([nd.Turn.call("lookup", "Looking it up.", key="answer"), "It is 42."]),
            [lookup],
            version="1",
        ),
        nd.Agent(
            "janitor",
            nd.ScriptedModel(
                [nd.Turn.call("drop_table", saying, name=table), _after_drop],
                stream_delay=0.001,
            ),
            [drop_table],
            version="1",
            stream=True,
        ),
        nd.Agent(
            "pair",
            nd.ScriptedModel(
                [
                    nd.Turn(
                        "Dropping both.",
                        [("drop_table", {"name": "a"}), ("drop_table", {"name": "b"})],
                    ),
                    "Both handled.",
                ]
            ),
            [drop_table],
            version="1",
        ),
        nd.Agent("flaky", nd.ScriptedModel([_flaky]), [lookup], version="1"),
        nd.Agent(
            "editor",
            nd.ScriptedModel([nd.Turn.call("edit_table", name=table), _after_drop]),
            [edit_table],
            version="1",
        ),
    ]


def helper_only() -> list[nd.Agent]:
    """Only the helper (an --agents that does not serve the janitor)."""
    return agents()[:1]
