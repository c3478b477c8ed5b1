"""The DataFrame views: runs, graphs, a run's checkpoints, a checkpoint's messages, events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._errors import RunNotFoundError
from .._extras import import_for
from .._gc import gc_paused
from ..stores._history_columns import history_columns
from . import _compact, _graph_rows, _records, _rows
from ._source import StoreLike, opened, run_events

if TYPE_CHECKING:
    from ._frame import InspectFrame

__all__ = ["events", "graphs", "history", "messages", "runs", "usage"]

_EVENT_COLUMNS = (
    "offset",
    "type",
    "step_index",
    "operation_id",
    "attempt_id",
    "summary",
    "created_at",
    "payload",
)
_USAGE_COLUMNS = (
    "step",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "input_tokens_delta",
    "output_tokens_delta",
    "tokens_delta",
    "cost",
    "cost_delta",
    "created_at",
)
_ROLES = ("system", "user", "assistant", "tool")


def frame_module() -> Any:
    """The pandas-backed frame module, or a clear error naming the ``inspect`` extra."""
    return import_for("inspect", "nbdurable.inspect's DataFrames", f"{__package__}._frame")


def runs(
    store: StoreLike,
    status: str | Sequence[str] | None = None,
    graph: str | None = None,
    *,
    compact: bool = False,
    all_columns: bool | None = None,
) -> InspectFrame:
    """Every run of a store, oldest first, one row per run (index ``run_id``).

    Every column, typed for analysis: ``agent`` (the runtime's agent id, or
    the sub-agent path), ``status`` (the runtime state when the runtime ran it,
    else the latest checkpoint's status), ``steps``, ``step_index`` (of the
    latest), ``input_tokens``, ``output_tokens``, ``total_tokens``, ``cost``
    (cumulative, a float; missing when the model has no price), ``created_at``,
    ``updated_at`` (UTC datetimes), ``parent_run`` and ``fork_step`` (set on a
    fork), ``pending_approvals``, ``finish_reason``, ``session_id`` and ``reason``
    (runtime runs); ``kind`` (``agent`` or ``task``: a task's ``agent`` is the
    task's name and its ``steps`` its checkpointed phases), ``graph_id``,
    ``node_id``, ``depends_on`` (node ids) and ``graph_status`` (derived from the
    graph's nodes) for graph nodes, ``owner_run`` for agent runs a task spawned,
    ``waiting_reason`` (what a runtime run waits for outside itself, e.g. a
    runtime with the definition it was submitted under).

    With ``compact=True``, a display view for reading instead (what ``%durable
    runs`` shows): ``status``, ``agent``, ``steps``, ``tokens`` (total), ``cost``
    (as text, ``$0.0012``; blank when the model has no price), ``age`` (since
    submission, ``3m 05s``) and ``reason`` (what a waiting run waits for, or why
    a run failed, was cancelled or needs attention). Its texts are for people:
    compute on the default frame.

    Args:
        store: A store, or a store URL.
        status: Only runs in this status (or these statuses).
        graph: Only the nodes of this graph, in submission (topological) order
            instead; no row when the store has no such graph.
        compact: The display view instead of the data.
        all_columns: Kept for code written while the compact view was the
            default: ``all_columns=False`` is ``compact=True``.
    """
    if all_columns is not None:
        compact = not all_columns
    rows, runtime = _records.run_rows(store, status, graph)
    module = frame_module()
    if compact:
        return module.frame(  # type: ignore[no-any-return]
            _compact.compact_rows(rows, runtime),
            columns=_compact.COMPACT_COLUMNS,
            index="run_id",
            categories={"status": module.STATUSES},
            integers=("steps", "tokens"),
        )
    return module.frame(  # type: ignore[no-any-return]
        rows,
        columns=_records.RUN_COLUMNS,
        index="run_id",
        categories={"status": module.STATUSES},
        datetimes=("created_at", "updated_at"),
        integers=("step_index", "fork_step"),
        floats=("cost",),
    )


def runs_every_column(
    store: StoreLike, status: str | Sequence[str] | None = None, graph: str | None = None
) -> InspectFrame:
    """The compact view's columns, then every other column of :func:`runs` (``--all``).

    One read of the store: the display columns (``tokens``, ``cost`` as text,
    ``age``, ``reason``) first, the typed data after them.
    """
    rows, runtime = _records.run_rows(store, status, graph)
    compact = _compact.compact_rows(rows, runtime)
    rest = [c for c in _records.RUN_COLUMNS if c not in _compact.COMPACT_COLUMNS]
    merged = [
        {**short, **{c: row[c] for c in rest}} for short, row in zip(compact, rows, strict=True)
    ]
    module = frame_module()
    return module.frame(  # type: ignore[no-any-return]
        merged,
        columns=(*_compact.COMPACT_COLUMNS, *rest),
        index="run_id",
        categories={"status": module.STATUSES},
        datetimes=("created_at", "updated_at"),
        integers=("steps", "tokens", "step_index", "fork_step"),
    )


def graphs(store: StoreLike) -> InspectFrame:
    """Every graph of a store, one row per graph in submission order (index ``graph_id``).

    Folded from the nodes' rows of :func:`runs`, so the two views agree. Columns:
    ``status`` (the graph's, derived from its nodes: categorical), ``nodes``, how
    many nodes are ``completed``, ``running`` (pending, running, retry_wait or
    cancelling), ``queued`` (behind their dependencies), ``waiting`` (for a human:
    waiting_approval or needs_attention), ``failed`` and ``cancelled`` (the counts
    add up to ``nodes``); ``total_tokens`` and ``cost`` (summed over the nodes;
    ``cost`` is missing when no node's model has a price), ``submitted_at`` and
    ``finished_at`` (UTC datetimes; the last node's update, set only once the
    graph is completed, failed or cancelled) and ``failed_nodes`` (node ids, in
    topological order: a node comes after the nodes it depends on, so the first
    did not fail because of a dependency). A store that keeps no runtime records
    has no graphs.

    Args:
        store: A store, or a store URL.
    """
    rows = _records.graph_rows(store)
    module = frame_module()
    return module.frame(  # type: ignore[no-any-return]
        rows,
        columns=_records.GRAPH_COLUMNS,
        index="graph_id",
        categories={"status": _graph_rows.GRAPH_STATUSES},
        datetimes=("submitted_at", "finished_at"),
        integers=("nodes", *_graph_rows.NODE_COUNTS, "total_tokens"),
        floats=("cost",),
    )


def history(store: StoreLike, run_id: str) -> InspectFrame:
    """A run's checkpoints, one row per step in save order (index ``step``).

    Columns: ``status``, ``finish_reason``, ``messages`` (history length),
    ``new_messages``, ``tool_calls`` (names of the calls made in the step),
    cumulative ``input_tokens``/``output_tokens``/``total_tokens``/``cost`` and
    their ``*_delta`` for the step, ``duration_ms`` with its ``model_ms`` and
    ``tool_ms`` parts (where the driver measured them), ``pending_approvals``
    (count) and ``created_at``. Reads the metadata of every checkpoint only;
    the messages of the latest one too when some checkpoint predates step stats
    (their tool calls are then read from the history).

    Raises:
        RunNotFoundError: The store has no checkpoint of the run.
    """
    module = frame_module()
    with gc_paused():  # a few objects per checkpoint, none in a cycle: no collector pass
        table = _records.history_table(store, run_id)
        return module.columns_frame(  # type: ignore[no-any-return]
            table,
            columns=_records.HISTORY_COLUMNS,
            index="step",
            **_records.HISTORY_TYPES,
        )


def messages(store: StoreLike, run_id: str, step_index: int | None = None) -> InspectFrame:
    """The messages of one checkpoint (the latest by default), index ``position``.

    Columns: ``role``, ``parts`` (part types), ``text`` (a one-line preview),
    ``tool_name``, ``tool_args``, ``tool_result`` (previews), ``is_error`` and
    ``images`` (how many image parts). Load the checkpoint itself for full texts.

    Raises:
        RunNotFoundError: The store has no checkpoint of the run.
        CheckpointNotFoundError: The run has no checkpoint at ``step_index``.
    """
    rows = _records.message_rows(store, run_id, step_index)
    return frame_module().frame(  # type: ignore[no-any-return]
        rows,
        columns=_records.MESSAGE_COLUMNS,
        index="position",
        categories={"role": _ROLES},
    )


def events(store: StoreLike, run_id: str, after: int = 0) -> InspectFrame:
    """A run's event log from offset ``after + 1`` (index ``offset``).

    Columns: ``type``, ``step_index``, ``operation_id``, ``attempt_id``,
    ``summary`` (one line), ``created_at`` and ``payload`` (the event's dict).

    Raises:
        ConfigurationError: The store keeps no event log.
        RunNotFoundError: Neither an event nor a checkpoint of the run exists.
    """
    with opened(store) as source:
        logged, _ = run_events(source, run_id, after)
    module = frame_module()
    frame = module.frame(
        _rows.event_rows(logged),
        columns=_EVENT_COLUMNS,
        index="offset",
        categories={"type": sorted({event.type for event in logged})},
        datetimes=("created_at",),
        integers=("step_index",),
    )
    return frame  # type: ignore[no-any-return]


def usage(store: StoreLike, run_id: str) -> InspectFrame:
    """Token and cost usage over a run: cumulative and per step (index ``step``).

    The usage columns of :func:`history`, without the rest.

    Raises:
        RunNotFoundError: The store has no checkpoint of the run.
    """
    with opened(store) as source:
        history = history_columns(source, run_id)
    if not len(history):
        raise RunNotFoundError(run_id)
    table = _rows.history_table(history)
    return frame_module().columns_frame(  # type: ignore[no-any-return]
        {column: table[column] for column in _USAGE_COLUMNS},
        columns=_USAGE_COLUMNS,
        index="step",
        datetimes=("created_at",),
        floats=("cost", "cost_delta"),
    )
