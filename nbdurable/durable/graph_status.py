"""A graph's status, derived from its nodes' run states (a graph is stored only as its nodes)."""

from __future__ import annotations

from collections.abc import Sequence

from .run_states import TERMINAL_STATES
from .runtime_run import RuntimeRun

__all__ = ["GRAPH_STATUSES", "graph_status"]

GRAPH_STATUSES: tuple[str, ...] = (
    "running",
    "waiting_approval",
    "needs_attention",
    "completed",
    "failed",
    "cancelled",
)
"""Every status :func:`graph_status` gives, in lifecycle order."""


def graph_status(records: Sequence[RuntimeRun]) -> str:
    """A graph's status, derived from its nodes' states.

    ``completed`` when every node completed; ``failed`` when every node is
    finished and some failed (``cancelled`` when the unsuccessful ones were all
    cancelled); otherwise ``needs_attention`` or ``waiting_approval`` when some
    node waits for a human, else ``running``.
    """
    states = [r.state for r in records]
    if states and all(s == "completed" for s in states):
        return "completed"
    if all(s in TERMINAL_STATES for s in states):
        unsuccessful = [s for s in states if s != "completed"]
        return "cancelled" if all(s == "cancelled" for s in unsuccessful) else "failed"
    if "needs_attention" in states:
        return "needs_attention"
    if "waiting_approval" in states:
        return "waiting_approval"
    return "running"
