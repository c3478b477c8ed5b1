"""Agents the bridge tests serve (in-thread, and through ``nbdurable serve --agents server.agents:agents``).

The CLI tests' agents (the janitor drops ``stg_2023`` here) plus a long streamed
run. ``agents`` is a factory: every runtime gets fresh instances.
"""

from __future__ import annotations

from support.cli_agents import FLAKY, lookup, make_agents

import nbdurable as nd

__all__ = ["FLAKY", "LONG_TEXT", "agents", "guarded_agents"]

LONG_TEXT = " ".join(f"word{i}" for i in range(120))


def agents() -> list[nd.Agent]:
    """Fresh instances of every test agent."""
    return [
        *make_agents("stg_2023", "Dropping it."),
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
    ]


def guarded_agents() -> list[nd.Agent]:
    """The served agents, plus two janitors whose ``drop_table`` calls are reserved.

    ``guarded``: only ana and lee decide, and not the submitter; ``reserved``:
    only ana decides (the approvers of the attack on approval links).
    """
    served = agents()
    janitor = next(a for a in served if a.id == "janitor")
    guarded = nd.Agent(
        "guarded",
        janitor.model,
        janitor.tools,
        version="1",
        approvers={"drop_table": ["ana", "lee"]},
        submitter_may_approve=False,
    )
    reserved = nd.Agent(
        "reserved", janitor.model, janitor.tools, version="1", approvers={"drop_table": ["ana"]}
    )
    return [*served, guarded, reserved]
