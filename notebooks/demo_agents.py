"""Agents for the demo notebooks, in a module so a worker process can import them.

``nbdurable worker --agents demo_agents:janitor`` serves them (run it from this
folder, or with the folder on ``PYTHONPATH``). Everything is offline: the model is
a ``ScriptedModel``.
"""

from __future__ import annotations

import nbdurable as nd

TABLES = {"stg_2023": 410, "stg_2024": 12}
"""Days since each warehouse table was last read."""


@nd.tool
def lookup(table: str) -> dict:
    """Row count and last read of a warehouse table."""
    rows = 0 if table == "stg_2023" else 1200
    return {"table": table, "rows": rows, "last_read_days": TABLES[table]}


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a warehouse table (a human approves each call)."""
    return f"dropped {name}"


janitor = nd.Agent(
    "janitor",
    nd.ScriptedModel(
        [
            nd.Turn.call("lookup", "Let me check the oldest table first.", table="stg_2023"),
            nd.Turn.call(
                "lookup",
                "stg_2023 is empty and nobody has read it for over a year. "
                "Before deciding anything I will also look at the newer staging table.",
                table="stg_2024",
            ),
            nd.Turn.call("drop_table", "stg_2023 is stale, so I will drop it.", name="stg_2023"),
            "Done: dropped stg_2023 and kept stg_2024, which was read 12 days ago.",
        ],
        stream_delay=0.05,
    ),
    [lookup, drop_table],
    version="1",
    stream=True,
    tool_recovery={"lookup": "safe"},
)
"""A warehouse janitor: two look-ups, one gated ``drop_table``, a summary."""
