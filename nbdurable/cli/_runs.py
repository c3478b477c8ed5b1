"""``nbdurable runs list|graphs|show|history|explain|rewind``: inspect a store from a shell.

These read the rows of :mod:`nbdurable.inspect`'s views as plain dicts (no
pandas: they work after a bare ``pip install nbdurable``) and print plain-text
tables fitted to the terminal, or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import CheckpointNotFoundError, ConfigurationError, RunNotFoundError
from ..durable.store import RunStore, maybe_await
from ..inspect import _compact, _records
from ..messages import Message, ToolResultPart, tool_message, user
from ..runs import late_result_line
from ._follow import call_text
from ._store import opened_store
from ._tables import cell, key_values, render, terminal_width

__all__ = ["explain", "graphs", "history", "list_runs", "rewind", "show"]


def _inspection() -> Any:
    from .. import inspect as inspection  # explain and rewind; no pandas is imported

    return inspection


def _json_rows(
    rows: Sequence[dict[str, Any]], columns: Sequence[str], times: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Rows as JSON-able dicts in the view's column order, times as ISO 8601 UTC."""
    return [
        {c: _records.iso(row.get(c)) if c in times else row.get(c) for c in columns} for row in rows
    ]


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _cost(value: Any) -> str:
    text = cell(value)
    return f"${float(value):.4f}" if text else ""


def _count(value: Any) -> Any:
    return value if cell(value) not in ("", "0") else ""


def _when(ms: int | None) -> str:
    """A local time without its year (``MM-DD HH:MM:SS``): the year is rarely news."""
    return _records.local_time(ms)[5:]


def _fork(row: dict[str, Any]) -> str:
    parent = cell(row.get("parent_run"))
    return f"{parent}@{cell(row.get('fork_step'))}" if parent else ""


def _graph(row: dict[str, Any]) -> str:
    """A graph node's graph and the graph's status (derived from its nodes)."""
    graph = cell(row.get("graph_id"))
    return f"{graph} ({cell(row.get('graph_status'))})" if graph else ""


_RUN_VIEW = (_records.RUN_COLUMNS, ("created_at", "updated_at"))
"""A run row's JSON: the view's columns, and which of them are times."""


@dataclass(frozen=True)
class Column:
    """A column of ``runs list``: its title, its text, how it aligns, how it gives way."""

    title: str
    value: Callable[[dict[str, Any]], Any]
    right: bool = False
    keep: bool = False
    """Never shrunk nor left out."""
    whole: bool = False
    """Never shrunk; left out when it holds no value."""
    drop: int | None = None
    """When the table is too wide, columns with a drop rank are left out, lowest rank
    first, before any column is shrunk; None: never left out (only shrunk)."""
    weight: float = 1.0
    """How much room it claims when columns shrink."""


RUN_LIST_COLUMNS: tuple[Column, ...] = (
    Column("run", lambda r: r["run_id"], keep=True),
    Column("agent", lambda r: r.get("agent")),
    Column("status", lambda r: r.get("status"), keep=True),
    Column("steps", lambda r: r.get("steps"), right=True, drop=60),
    Column("tokens", lambda r: r.get("total_tokens"), right=True, drop=50),
    Column("cost", lambda r: _cost(r.get("cost")), right=True, whole=True),
    Column("age", lambda r: _compact.age(r.get("created_at")), right=True, whole=True),
    Column("pending", lambda r: _count(r.get("pending_approvals")), right=True, drop=40),
    Column("fork of", _fork, drop=30),
    Column("graph", _graph, drop=20),
    Column("after", lambda r: r.get("depends_on"), drop=10),
    Column("owner", lambda r: r.get("owner_run"), drop=0),
)
"""``runs list``'s columns, most useful first. At 80 columns a narrow terminal
loses owner, after, graph, fork of, pending, tokens and steps in that order
(empty ones first of all); run ids and agent names are cut last."""


def render_columns(columns: Sequence[Column], rows: Sequence[dict[str, Any]]) -> str:
    """``rows`` as a table of ``columns``, fitted to the terminal."""
    ranked = sorted((c.drop, i) for i, c in enumerate(columns) if c.drop is not None)
    return render(
        [c.title for c in columns],
        [[c.value(row) for c in columns] for row in rows],
        right=[c.right for c in columns],
        keep=[i for i, c in enumerate(columns) if c.keep],
        drop=[i for _, i in ranked],
        whole=[i for i, c in enumerate(columns) if c.whole],
        weights=[c.weight for c in columns],
    )


def _print_rows(
    args: argparse.Namespace,
    rows: Sequence[dict[str, Any]] | None,
    view: tuple[Sequence[str], Sequence[str]],
    columns: Sequence[Column],
    empty: str,
) -> None:
    """``rows`` as JSON (``view``: the view's columns and times), or a table, or ``empty``."""
    if args.json:
        _print_json(_json_rows(rows or [], *view))
    else:
        print(render_columns(columns, rows) if rows else empty)


def list_runs(args: argparse.Namespace) -> int:
    """The runs view: one line per run, oldest first (a graph's nodes in topological order)."""
    if args.graph is not None:
        return _list_nodes(args)
    with opened_store(args.store) as store:
        rows, _ = _records.run_rows(store, status=args.status)
    empty = "no runs" + (f" in status {args.status}" if args.status else "") + f" in {args.store}"
    _print_rows(args, rows, _RUN_VIEW, RUN_LIST_COLUMNS, empty)
    if not args.json:
        _print_waiting(rows)
    return 0


def _print_waiting(rows: list[dict[str, Any]]) -> None:
    """One line per run that waits for something outside itself (too long for a column)."""
    waiting = [(r["run_id"], cell(r.get("waiting_reason"))) for r in rows]
    for run_id, reason in waiting:
        if reason:
            print(textwrap.fill(f"{run_id} {reason}", terminal_width(), subsequent_indent="  "))


def _list_nodes(args: argparse.Namespace) -> int:
    """``runs list --graph ID``: the graph's nodes in the order they were submitted.

    Raises:
        RunNotFoundError: The store has no such graph (an empty listing would
            hide a mistyped id).
    """
    with opened_store(args.store) as store:
        rows, _ = _records.run_rows(store, graph=args.graph)
    if not rows:
        raise RunNotFoundError(
            args.graph,
            f"no graph {args.graph!r} in {args.store} ('nbdurable runs graphs' lists its graphs)",
        )
    if args.status is not None:
        rows = [r for r in rows if r["status"] == args.status]
    empty = f"no node of graph {args.graph} in status {args.status}"
    _print_rows(args, rows, _RUN_VIEW, _NODE_COLUMNS, empty)
    return 0


# No steps or times: `runs list` and `runs history` have them, and without them
# the dependencies and the reasons a node failed or waits fit 100 columns.
_NODE_COLUMNS = (
    Column("run", lambda r: r["run_id"], keep=True),
    Column("node", lambda r: r.get("node_id"), keep=True),
    Column("agent", lambda r: r.get("agent")),
    Column("status", lambda r: r.get("status"), keep=True),
    Column("tokens", lambda r: r.get("total_tokens"), right=True),
    Column("cost", lambda r: _cost(r.get("cost")), right=True),
    Column("after", lambda r: r.get("depends_on")),
    Column("pending", lambda r: _count(r.get("pending_approvals")), right=True),
    Column("reason", lambda r: r.get("reason")),
)


def _took(start: int | None, end: int | None) -> str:
    """How long a finished graph took, from its submission to its last node's end."""
    if start is None or end is None:
        return ""
    seconds = (end - start) / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def graphs(args: argparse.Namespace) -> int:
    """The graphs view: one line per graph, in submission order."""
    with opened_store(args.store) as store:
        rows = _records.graph_rows(store)
    view = (_records.GRAPH_COLUMNS, ("submitted_at", "finished_at"))
    _print_rows(args, rows, view, _GRAPH_COLUMNS, f"no graphs in {args.store}")
    return 0


def _counted(state: str) -> Column:
    return Column(state, lambda r: _count(r.get(state)), right=True)


# "done" reads as progress (completed of all nodes); the other counts are left
# blank at zero, so a narrow terminal drops the states no graph is in.
_GRAPH_COLUMNS = (
    Column("graph", lambda r: r["graph_id"], keep=True),
    Column("status", lambda r: r.get("status"), keep=True),
    Column("done", lambda r: f"{r.get('completed')}/{r.get('nodes')}", right=True, keep=True),
    *[_counted(state) for state in ("running", "queued", "waiting", "failed", "cancelled")],
    Column("tokens", lambda r: r.get("total_tokens"), right=True),
    Column("cost", lambda r: _cost(r.get("cost")), right=True),
    Column("submitted", lambda r: _when(r.get("submitted_at")), keep=True),
    Column("took", lambda r: _took(r.get("submitted_at"), r.get("finished_at")), right=True),
    Column("failed nodes", lambda r: r.get("failed_nodes")),
)


def _run_row(store: Any, run_id: str) -> dict[str, Any]:
    rows, _ = _records.run_rows(store)
    for row in rows:
        if row["run_id"] == run_id:
            return row
    raise RunNotFoundError(run_id)


def _approvals(store: Any, run_id: str, verdicts: dict[str, Any]) -> list[dict[str, Any]]:
    checkpoint = store.load(run_id)
    requests = checkpoint.pending_approvals if checkpoint is not None else ()
    return [
        {
            "approval_id": r.approval_id,
            "tool_name": r.tool_name,
            "input": r.input,
            "agent_path": list(r.agent_path),
            "answered": r.approval_id in verdicts,
        }
        for r in requests
    ]


_PART_NAMES = {"tool_call": "call", "tool_result": "result", "tool_approval_request": "approval"}


def _parts(value: Any) -> str:
    names = [n.strip() for n in cell(value).split(",") if n.strip()]
    return ", ".join(_PART_NAMES.get(n, n) for n in names)


def _tool(message: dict[str, Any]) -> str:
    args = cell(message.get("tool_args"))
    return " ".join(x for x in (cell(message.get("tool_name")), args) if x and x != "{}")


def _checkpoints(row: dict[str, Any]) -> str:
    latest = cell(row.get("step_index"))
    return f"{row.get('steps')} (latest step {latest})" if latest else "none yet"


def _no_checkpoint_yet(store: Any, run_id: str, read: Callable[[], Any]) -> Any:
    """``read()``, or None for a runtime run that has not checkpointed yet."""
    try:
        return read()
    except (RunNotFoundError, CheckpointNotFoundError):
        if isinstance(store, RunStore) and store.rt_get(run_id) is not None:
            return None
        raise


def show(args: argparse.Namespace) -> int:
    """A run's summary, its pending approvals and the messages of its latest checkpoint."""
    with opened_store(args.store) as store:
        row = _run_row(store, args.run)
        record = store.rt_get(args.run) if isinstance(store, RunStore) else None
        approvals = _approvals(store, args.run, record.verdicts if record is not None else {})
        messages = _no_checkpoint_yet(
            store, args.run, lambda: _records.message_rows(store, args.run)
        )
    if args.json:
        summary = _json_rows([row], *_RUN_VIEW)[0]
        summary["error"] = record.error if record is not None else None
        summary["result_text"] = record.result_text if record is not None else None
        late = record.late_results if record is not None else []
        summary["late_results"] = [entry.model_dump(mode="json") for entry in late]
        rows = _json_rows(messages or [], _records.MESSAGE_COLUMNS)
        _print_json({"run": summary, "approvals": approvals, "messages": rows})
        return 0
    tokens = (
        f"{row.get('total_tokens')} (in {row.get('input_tokens')}, out {row.get('output_tokens')})"
    )
    status = cell(row.get("status")) + (
        f" ({cell(row.get('reason'))})" if cell(row.get("reason")) else ""
    )
    pairs: list[tuple[str, Any]] = [
        ("run", row["run_id"]),
        ("agent", row.get("agent")),
        ("status", status),
        ("waiting", row.get("waiting_reason")),
        ("error", record.error if record is not None else None),
        ("session", row.get("session_id")),
        ("checkpoints", _checkpoints(row)),
        ("finish", row.get("finish_reason")),
        ("tokens", tokens),
        ("cost", _cost(row.get("cost"))),
        ("created", _records.local_time(row.get("created_at"))),
        ("updated", _records.local_time(row.get("updated_at"))),
        ("fork of", _fork(row)),
    ]
    for approval in approvals:
        call = call_text(approval["tool_name"], approval["input"])
        note = "  (answered)" if approval["answered"] else ""
        pairs.append(("approval", f"{approval['approval_id']}  {call}{note}"))
    for late_result in record.late_results if record is not None else []:
        pairs.append(("late result", late_result_line(late_result)))
    # whole, not cut to the terminal: what it waits for, and a call that already ran (late)
    print(key_values(pairs, wrap={"waiting", "late result"}))
    rows = messages or []
    if rows:
        print()
        headers = ["#", "role", "parts", "text", "tool", "result"]
        table = [
            [
                m["position"],
                m.get("role"),
                _parts(m.get("parts")),
                m.get("text"),
                _tool(m),
                ("error: " if m.get("is_error") is True else "") + cell(m.get("tool_result")),
            ]
            for m in rows
        ]
        print(render(headers, table, keep=[0, 1], weights=[1, 1, 1, 3, 1.5, 1.5]))
    return 0


def _ms(value: Any) -> str:
    text = cell(value)
    return f"{text} ms" if text else ""


def history(args: argparse.Namespace) -> int:
    """One line per checkpoint of a run."""
    with opened_store(args.store) as store:
        steps = _no_checkpoint_yet(store, args.run, lambda: _records.history_rows(store, args.run))
    view = (_records.HISTORY_COLUMNS, ("created_at",))
    _print_rows(args, steps, view, _HISTORY_COLUMNS, f"run {args.run} has no checkpoint yet")
    return 0


# At 80 columns the total message count goes first (new messages stays), and the
# tool names claim the most room: "tool c…" tells nothing.
_HISTORY_COLUMNS = (
    Column("step", lambda h: h["step"], right=True, keep=True),
    Column("status", lambda h: h.get("status"), keep=True),
    Column("finish", lambda h: h.get("finish_reason")),
    Column("msgs", lambda h: h.get("messages"), right=True, drop=0),
    Column("new", lambda h: h.get("new_messages"), right=True),
    Column("tool calls", lambda h: h.get("tool_calls"), weight=4.0),
    Column("+tokens", lambda h: h.get("tokens_delta"), right=True),
    Column("tokens", lambda h: h.get("total_tokens"), right=True),
    Column("duration", lambda h: _ms(h.get("duration_ms")), right=True),
    Column("pending", lambda h: _count(h.get("pending_approvals")), right=True),
)


def explain(args: argparse.Namespace) -> int:
    """The run explained in words."""
    with opened_store(args.store) as store:
        explanation = _inspection().explain(store, args.run, context="terminal")
    if args.json:
        _print_json(explanation.to_dict())
    else:
        print(str(explanation))
    return 0


async def _tool_result_edit(store: Any, run_id: str, step: int, text: str) -> Message:
    """The step's last message (a tool message with one result) with ``text`` as the result."""
    try:
        checkpoint = await maybe_await(store.load(run_id, step_index=step))
    except CheckpointNotFoundError:
        checkpoint = None
    if checkpoint is None:
        raise CheckpointNotFoundError(run_id, f"run {run_id!r} has no checkpoint at step {step}")
    last = checkpoint.messages[-1] if checkpoint.messages else None
    if last is None or last.role != "tool":
        what = "no message"
        if last is not None:
            what = ("an " if last.role[0] in "aeiou" else "a ") + f"{last.role} message"
        raise ConfigurationError(
            f"step {step} of {run_id!r} ends with {what}, not a tool result; "
            "--edit-tool-result edits a step that ends with one"
        )
    results = last.tool_results
    if len(results) != 1:
        raise ConfigurationError(
            f"step {step} of {run_id!r} holds {len(results)} tool results; "
            "--edit-tool-result edits a step with exactly one"
        )
    only = results[0]
    return tool_message(
        [ToolResultPart(tool_call_id=only.tool_call_id, tool_name=only.tool_name, result=text)]
    )


async def rewind(args: argparse.Namespace) -> int:
    """Fork a new run from a step (optionally editing its last message); print the new id."""
    with opened_store(args.store) as store:
        edit: Message | None = None
        if args.edit_user is not None:
            edit = user(args.edit_user)
        elif args.edit_tool_result is not None:
            edit = await _tool_result_edit(store, args.run, args.step, args.edit_tool_result)
        checkpoint = _inspection().rewind(
            store, args.run, args.step, new_run_id=args.run_id, edit=edit
        )
    print(checkpoint.run_id)
    return 0
