"""Agents the bridge tests serve (in-thread, and through ``nbdurable serve --agents server.agents:agents``).

``agents`` is a factory: every runtime gets fresh instances of the same definitions.
"""

from __future__ import annotations

import nbdurable as nd
from nbdurable.models.base import ModelRequest

FLAKY = {"fail": True}
"""While true, the ``flaky`` agent's model raises (a test flips it before ``retry``)."""

LONG_TEXT = " ".join(f"word{i}" for i in range(120))


@nd.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key} = 42"


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a warehouse table."""
    return f"dropped {name}"


def _after_drop(request: ModelRequest) -> str:
    result = request.messages[-1].tool_results[0]
    return f"Kept it: {result.result}" if result.is_error else f"Done: {result.result}."


def _flaky(request: ModelRequest) -> str:
    if FLAKY["fail"]:
        raise nd.ModelError("the model is down")
    return "Back up."


def agents() -> list[nd.Agent]:
    """Fresh instances of every test agent."""
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
                [nd.Turn.call("drop_table", "Dropping it.", name="stg_2023"), _after_drop],
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
        nd.Agent(
            # a long streamed run: ~600 model_delta events over ~1.5 s, with a tool call
            "streamer",
            nd.ScriptedModel(
                [nd.Turn.call("lookup", LONG_TEXT, key="x"), LONG_TEXT + " The end."],
                stream_delay=0.005,
            ),
            [lookup],
            version="1",
            stream=True,
        ),
        nd.Agent("flaky", nd.ScriptedModel([_flaky]), [lookup], version="1"),
    ]
