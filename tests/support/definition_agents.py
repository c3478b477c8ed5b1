"""Agents whose registrations differ only in what each run captures at submission.

``janitor(stream=..., max_steps=...)`` is the same definition whatever the two
settings say: a run records both at its submission and executes with them, so a
worker registering ``stream=False`` (``agents``, what the ``nbdurable worker``
subprocesses of the tests serve) must execute a run submitted with
``stream=True``. ``changed_agents`` is a definition that does differ (the
schema of ``sweep``), for the waiting reason that names the difference.
"""

from __future__ import annotations

import nbdurable as nd
from nbdurable.runtime import Agent


@nd.tool
def sweep(table: str) -> str:
    """Sweep a staging table."""
    return f"swept {table}"


@nd.tool(name="sweep")
def sweep_with_cascade(table: str, cascade: bool = False) -> str:
    """Sweep a staging table."""
    return f"swept {table}{' (cascade)' if cascade else ''}"


def janitor(*, stream: bool, max_steps: int = 20, tool: nd.Tool = sweep) -> Agent:
    """The janitor v1; ``stream`` and ``max_steps`` are per-run settings, not its definition."""
    return Agent(
        "janitor",
        nd.ScriptedModel([nd.Turn.call("sweep", table="stg_a"), "Swept stg_a."]),
        tools=[tool],
        version="1",
        stream=stream,
        max_steps=max_steps,
        tool_recovery={"sweep": "safe"},
    )


agents = [janitor(stream=False)]
"""What the worker registers: ``stream=False``."""

changed_agents = [janitor(stream=False, tool=sweep_with_cascade)]
"""The janitor v1 with another schema of ``sweep``: another definition."""
