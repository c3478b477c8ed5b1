"""Graph rows as plain dicts, folded from the runs view's rows (no pandas here).

A graph is stored only as its nodes' run records, so every number of a graph row
comes from the rows :func:`._rows.run_rows` already computed for those nodes:
the graph view and the runs view cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..runs import (
    ACTIVE_STATES,
    CLAIMABLE_STATES,
    GRAPH_STATUSES,
    HUMAN_STATES,
    RUN_STATES,
    TERMINAL_STATES,
    RuntimeRun,
)

__all__ = ["GRAPH_STATUSES", "NODE_COUNTS", "graph_rows", "node_rows"]

NODE_COUNTS: dict[str, tuple[str, ...]] = {
    "completed": ("completed",),
    "running": tuple(s for s in RUN_STATES if s in CLAIMABLE_STATES | ACTIVE_STATES),
    "queued": ("queued",),
    "waiting": tuple(s for s in RUN_STATES if s in HUMAN_STATES),
    "failed": ("failed",),
    "cancelled": ("cancelled",),
}
"""Count column -> the node states it counts; together they cover every run state."""

_COLUMN_OF = {state: column for column, states in NODE_COUNTS.items() for state in states}


def _members(rows: Iterable[dict[str, Any]], runtime: Iterable[RuntimeRun]) -> dict[str, list[Any]]:
    """Each graph's node rows, graphs and nodes in submission order.

    ``runtime`` comes from ``rt_list``, ordered by the global submission counter;
    the rows are ordered by time, which ties within one graph (its nodes are
    written together) and so cannot give the topological order.
    """
    by_run = {row["run_id"]: row for row in rows}
    members: dict[str, list[Any]] = {}
    for run in runtime:
        row = by_run.get(run.run_id)
        if run.graph_id is not None and row is not None:
            members.setdefault(run.graph_id, []).append(row)
    return members


def node_rows(
    rows: Iterable[dict[str, Any]], runtime: Iterable[RuntimeRun], graph_id: str
) -> list[dict[str, Any]]:
    """The run rows of one graph's nodes, in submission (topological) order."""
    return _members(rows, runtime).get(graph_id, [])


def graph_rows(
    rows: Iterable[dict[str, Any]], runtime: Iterable[RuntimeRun]
) -> list[dict[str, Any]]:
    """One row per graph, in submission order, from the runs view's rows.

    Args:
        rows: The rows of :func:`._rows.run_rows` (they carry ``graph_status``).
        runtime: The store's runtime records in submission order (``rt_list``).
    """
    return [_graph_row(graph_id, nodes) for graph_id, nodes in _members(rows, runtime).items()]


def _graph_row(graph_id: str, nodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    status = nodes[0]["graph_status"]
    counts = dict.fromkeys(NODE_COUNTS, 0)
    for node in nodes:
        counts[_COLUMN_OF[node["status"]]] += 1
    costs = [node["cost"] for node in nodes if node["cost"] is not None]
    return {
        "graph_id": graph_id,
        "status": status,
        "nodes": len(nodes),
        **counts,
        "total_tokens": sum(node["total_tokens"] for node in nodes),
        # Unknown stays unknown: a graph whose models have no price has no cost, not $0.
        "cost": sum(costs) if costs else None,
        "submitted_at": min(node["created_at"] for node in nodes),
        "finished_at": (
            max(node["updated_at"] for node in nodes) if status in TERMINAL_STATES else None
        ),
        "failed_nodes": ", ".join(
            node["node_id"] or node["run_id"] for node in nodes if node["status"] == "failed"
        ),
    }
