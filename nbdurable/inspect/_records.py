"""The views' rows as plain dicts, read from a store without pandas.

The DataFrame views (:mod:`._views`) are built from these rows; the terminal's
``nbdurable runs ...`` commands print them directly, so they work where pandas
is not installed. Times are epoch milliseconds here; :func:`iso` and
:func:`local_time` turn them into text.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from .._errors import RunNotFoundError
from ..durable._lookup import checkpoint_at
from ..durable.store import RunStore
from ..runs import RuntimeRun
from ..stores._history_columns import history_columns
from . import _graph_rows, _rows
from ._source import StoreLike, opened

__all__ = [
    "GRAPH_COLUMNS",
    "HISTORY_COLUMNS",
    "HISTORY_TYPES",
    "MESSAGE_COLUMNS",
    "RUN_COLUMNS",
    "graph_rows",
    "history_rows",
    "history_table",
    "iso",
    "local_time",
    "message_rows",
    "run_rows",
]

RUN_COLUMNS = (
    "run_id",
    "agent",
    "status",
    "steps",
    "step_index",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "cost",
    "created_at",
    "updated_at",
    "parent_run",
    "fork_step",
    "pending_approvals",
    "finish_reason",
    "session_id",
    "reason",
    "kind",
    "graph_id",
    "node_id",
    "depends_on",
    "graph_status",
    "owner_run",
    "waiting_reason",
)
HISTORY_COLUMNS = (
    "step",
    "status",
    "finish_reason",
    "messages",
    "new_messages",
    "tool_calls",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "tokens_delta",
    "input_tokens_delta",
    "output_tokens_delta",
    "cost",
    "cost_delta",
    "duration_ms",
    "model_ms",
    "tool_ms",
    "pending_approvals",
    "created_at",
    "decided_by",
    "via",
)
HISTORY_TYPES: dict[str, Any] = {
    "categories": {"status": ("running", "suspended", "completed")},
    "datetimes": ("created_at",),
    "integers": ("duration_ms", "model_ms", "tool_ms"),
    "floats": ("cost", "cost_delta"),
}
"""How the history frame types its columns (the keywords of ``frame``/``columns_frame``)."""
MESSAGE_COLUMNS = (
    "position",
    "role",
    "parts",
    "text",
    "tool_name",
    "tool_args",
    "tool_result",
    "is_error",
    "images",
)
GRAPH_COLUMNS = (
    "graph_id",
    "status",
    "nodes",
    *_graph_rows.NODE_COUNTS,
    "total_tokens",
    "cost",
    "submitted_at",
    "finished_at",
    "failed_nodes",
)


def run_rows(
    store: StoreLike, status: str | Sequence[str] | None = None, graph: str | None = None
) -> tuple[list[dict[str, Any]], list[RuntimeRun]]:
    """Every run's full row, and the runtime's records.

    Rows come oldest first (a graph's nodes in topological order with
    ``graph``), kept to ``status``.
    """
    with opened(store) as source:
        records = source.list_runs()
        runtime: list[RuntimeRun] = source.rt_list() if isinstance(source, RunStore) else []
    rows = _rows.run_rows(records, runtime)
    if graph is not None:
        rows = _graph_rows.node_rows(rows, runtime, graph)
    if status is not None:
        wanted = {status} if isinstance(status, str) else set(status)
        rows = [row for row in rows if row["status"] in wanted]
    return rows, runtime


def graph_rows(store: StoreLike) -> list[dict[str, Any]]:
    """One row per graph, in submission order."""
    rows, runtime = run_rows(store)
    return _graph_rows.graph_rows(rows, runtime)


def history_table(store: StoreLike, run_id: str) -> dict[str, list[Any]]:
    """The columns of ``run_id``'s history frame, by name, one value per checkpoint.

    Raises:
        RunNotFoundError: The store has no checkpoint of the run.
    """
    with opened(store) as source:
        history = history_columns(source, run_id)
        if not len(history):
            raise RunNotFoundError(run_id)
        latest = source.load(run_id) if _rows.needs_messages(history) else None
        # The verdicts fill in the steps that waited for approvals: no such step, no read.
        waited = any(history.pending_approvals)
        record = source.rt_get(run_id) if waited and isinstance(source, RunStore) else None
    return _rows.history_table(history, latest, record.decided if record is not None else None)


def history_rows(store: StoreLike, run_id: str) -> list[dict[str, Any]]:
    """One row per checkpoint of ``run_id``: :func:`history_table` by row.

    Raises:
        RunNotFoundError: The store has no checkpoint of the run.
    """
    table = history_table(store, run_id)
    names = list(table)
    return [dict(zip(names, values, strict=True)) for values in zip(*table.values(), strict=True)]


def message_rows(
    store: StoreLike, run_id: str, step_index: int | None = None
) -> list[dict[str, Any]]:
    """One row per message of a checkpoint (the latest by default).

    Raises:
        RunNotFoundError: The store has no checkpoint of the run.
        CheckpointNotFoundError: The run has no checkpoint at ``step_index``.
    """
    with opened(store) as source:
        checkpoint = checkpoint_at(source, run_id, step_index)
    return _rows.message_rows(checkpoint.messages)


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def iso(ms: int | None) -> str | None:
    """Epoch ms as an ISO 8601 UTC time with milliseconds (``...T12:00:00.123Z``)."""
    if ms is None:
        return None
    return _utc(ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def local_time(ms: int | None) -> str:
    """Epoch ms as local ``YYYY-MM-DD HH:MM:SS``; blank for None."""
    if ms is None:
        return ""
    return _utc(ms).astimezone().strftime("%Y-%m-%d %H:%M:%S")
