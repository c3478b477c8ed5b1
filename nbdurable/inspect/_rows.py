"""Inspection rows as plain dicts: what the DataFrames hold, computed without pandas.

Timestamps stay epoch milliseconds here; :mod:`._frame` turns them into datetimes.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..durable._checkpoint import AgentCheckpoint
from ..durable._records import RunRecord
from ..events._model import Event
from ..messages import (
    ApprovalRequestPart,
    ImagePart,
    Message,
    TextPart,
    ToolApprovalRequest,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from ..runs import Decision, RuntimeRun, who_decided
from ..stores._history_columns import HistoryColumns

__all__ = [
    "PREVIEW_CHARS",
    "event_rows",
    "history_rows",
    "history_table",
    "json_text",
    "message_row",
    "message_rows",
    "needs_messages",
    "preview",
    "run_rows",
    "step_messages",
    "usage_columns",
]

PREVIEW_CHARS = 120
"""Longest text a preview cell holds; the full text stays in the store."""


def preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """One line of at most ``limit`` characters: whitespace collapsed, cut with "…"."""
    text = value if isinstance(value, str) else json_text(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_text(value: Any) -> str:
    """``value`` as compact JSON (keys sorted; what JSON cannot hold as its ``repr``)."""
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)
    except ValueError:  # circular structures: show what Python shows
        return repr(value)


def usage_columns(usage: Usage) -> dict[str, Any]:
    """A usage as flat columns (``cost`` is None when unknown)."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cost": usage.cost,
    }


def run_rows(records: Iterable[RunRecord], runtime: Iterable[RuntimeRun]) -> list[dict[str, Any]]:
    """One row per run, oldest first: the store's run records joined with the runtime's.

    A runtime run that has not checkpointed yet (queued, pending) still gets a
    row; its status is the runtime state, which wins over the checkpoint status.
    Runs created in the same millisecond come in submission order.
    """
    by_id = {r.run_id: r for r in runtime}
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in records:
        seen.add(record.run_id)
        rows.append(_run_row(record, by_id.get(record.run_id)))
    rows.extend(_run_row(None, run) for run_id, run in by_id.items() if run_id not in seen)
    graphs = _graph_statuses(by_id.values())
    for row in rows:
        run = by_id.get(row["run_id"])
        row.update(_runtime_columns(run, by_id, graphs))
        if run is not None and run.kind == "task":
            row["steps"] = run.phase  # a task's checkpoints are its completed phases
    # Submission order: runs created in the same millisecond keep the runtime's
    # submission sequence (their ids say nothing about which came first).
    rows.sort(key=lambda row: (row["created_at"], _seq(by_id.get(row["run_id"])), row["run_id"]))
    return rows


def _seq(run: RuntimeRun | None) -> int:
    return run.seq if run is not None else -1


def _graph_statuses(runs: Iterable[RuntimeRun]) -> dict[str, str]:
    from ..runs import graph_status

    nodes: dict[str, list[RuntimeRun]] = {}
    for run in runs:
        if run.graph_id is not None:
            nodes.setdefault(run.graph_id, []).append(run)
    return {graph_id: graph_status(members) for graph_id, members in nodes.items()}


def _runtime_columns(
    run: RuntimeRun | None, by_id: dict[str, RuntimeRun], graphs: dict[str, str]
) -> dict[str, Any]:
    """The columns of tasks, graphs and owned runs.

    ``kind``, ``graph_id``, ``node_id``, ``depends_on`` (node ids),
    ``graph_status`` and ``owner_run``.
    """
    if run is None:
        return {
            "kind": None,
            "graph_id": None,
            "node_id": None,
            "depends_on": None,
            "graph_status": None,
            "owner_run": None,
        }
    deps = [by_id[d].node_id or d if d in by_id else d for d in run.depends_on]
    return {
        "kind": run.kind,
        "graph_id": run.graph_id,
        "node_id": run.node_id,
        "depends_on": ", ".join(deps) if run.graph_id is not None else None,
        "graph_status": graphs.get(run.graph_id) if run.graph_id is not None else None,
        "owner_run": run.owner_run_id,
    }


def _run_row(record: RunRecord | None, run: RuntimeRun | None) -> dict[str, Any]:
    assert record is not None or run is not None
    fork = record.forked_from if record is not None else None
    usage = record.usage if record is not None else Usage()
    created = record.created_at if record is not None else 0
    if run is not None:
        created = min(created, run.created_at) if record is not None else run.created_at
    updated = max(
        record.updated_at if record is not None else 0, run.updated_at if run is not None else 0
    )
    return {
        "run_id": record.run_id if record is not None else run.run_id,  # type: ignore[union-attr]
        "agent": run.agent_id if run is not None else _agent_of(record),
        "status": run.state if run is not None else record.status,  # type: ignore[union-attr]
        "steps": record.step_count if record is not None else 0,
        "step_index": record.step_index if record is not None else None,
        **usage_columns(usage),
        "created_at": created,
        "updated_at": updated,
        "parent_run": fork.run_id if fork is not None else None,
        "fork_step": fork.step_index if fork is not None else None,
        "pending_approvals": record.pending_approval_count if record is not None else 0,
        "finish_reason": record.finish_reason if record is not None else None,
        "session_id": run.session_id if run is not None else None,
        "reason": run.reason if run is not None else None,
        # what it waited for no longer matters once it is finished (cancelled while waiting)
        "waiting_reason": run.waiting_reason if run is not None and not run.finished else None,
    }


def _agent_of(record: RunRecord | None) -> str | None:
    # A run of the loop API has no agent id; a sub-agent's checkpoints name its path.
    if record is not None and record.agent_path:
        return "/".join(record.agent_path)
    return None


def step_messages(
    latest: AgentCheckpoint | None, message_counts: Sequence[int]
) -> list[tuple[Message, ...]]:
    """The messages each checkpoint added, sliced from the latest checkpoint's history.

    ``message_counts`` are the run's checkpoints' history lengths, in save
    order. Within a run the history only grows (every step appends), so
    checkpoint ``i`` holds the first ``message_counts[i]`` messages of the
    latest one: one load gives every step's messages. A count that shrinks
    (never written by nbdurable) yields no messages for that step rather than
    wrong ones.
    """
    messages = latest.messages if latest is not None else ()
    added: list[tuple[Message, ...]] = []
    previous = 0
    for count in message_counts:
        added.append(messages[previous:count] if count >= previous else ())
        previous = count
    return added


def needs_messages(history: HistoryColumns) -> bool:
    """Whether some step's tool calls must be read from the messages.

    Checkpoints written by this version's drivers carry their step's tool call
    names (``stats``); older ones, and checkpoints other code saved, do not. A
    fork's first checkpoint made no calls.
    """
    forked = bool(history.forked_from) and history.forked_from[0] is not None
    return any(
        calls is None and not (i == 0 and forked) for i, calls in enumerate(history.tool_calls)
    )


def history_table(
    history: HistoryColumns,
    latest: AgentCheckpoint | None = None,
    decided: Mapping[str, Decision] | None = None,
) -> dict[str, list[Any]]:
    """The history frame's columns (one value per checkpoint, in save order), by name.

    ``latest`` (the run's latest checkpoint) is needed only when
    :func:`needs_messages` says so; without it such steps list no tool calls.
    ``decided`` (the run record's verdicts, by approval id) fills ``decided_by``
    and ``via`` of a step that waited for approvals. Built column by column:
    the cumulative columns' deltas are a subtraction of the column shifted by
    one (the first step's "before" is an empty usage: no tokens, unknown cost).
    """
    counts, created = history.message_count, history.created_at
    inputs, outputs, totals = history.input_tokens, history.output_tokens, history.total_tokens
    costs, started = history.cost, history.started_at
    before_costs: list[float | None] = [None, *costs[:-1]]
    table: dict[str, list[Any]] = {
        "step": history.step_index,
        "status": history.status,
        "finish_reason": history.finish_reason,
        "messages": counts,
        "new_messages": _minus_previous(counts),
        "tool_calls": _tool_calls(history, latest),
        "input_tokens": inputs,
        "output_tokens": outputs,
        "total_tokens": totals,
        "cost": costs,
        "tokens_delta": _minus_previous(totals),
        "input_tokens_delta": _minus_previous(inputs),
        "output_tokens_delta": _minus_previous(outputs),
        "cost_delta": list(map(_cost_delta, costs, before_costs)),
        "duration_ms": [
            now - began if began is not None else None if previous is None else now - previous
            for now, began, previous in zip(created, started, [None, *created[:-1]], strict=True)
        ],
        "model_ms": history.model_ms,
        "tool_ms": history.tool_ms,
        "pending_approvals": list(map(len, history.pending_approvals)),
        "created_at": created,
    }
    table.update(_decider_columns(history.pending_approvals, decided or {}))
    return table


def history_rows(
    history: HistoryColumns,
    latest: AgentCheckpoint | None = None,
    decided: Mapping[str, Decision] | None = None,
) -> list[dict[str, Any]]:
    """One row per checkpoint of a run, in save order: :func:`history_table` by row."""
    table = history_table(history, latest, decided)
    names = list(table)
    return [dict(zip(names, values, strict=True)) for values in zip(*table.values(), strict=True)]


def _minus_previous(values: list[int]) -> list[int]:
    """Each value minus the one before it (the first minus 0)."""
    return list(map(operator.sub, values, [0, *values[:-1]]))


def _tool_calls(history: HistoryColumns, latest: AgentCheckpoint | None) -> list[str]:
    """Each step's tool call names, joined: from its stats, else from the messages it added."""
    calls = history.tool_calls
    if latest is None or all(names is not None for names in calls):
        return ["" if names is None else ", ".join(names) for names in calls]
    added = step_messages(latest, history.message_count)
    return [
        ", ".join(
            names
            if names is not None
            else [call.tool_name for message in added[i] for call in message.tool_calls]
        )
        for i, names in enumerate(calls)
    ]


def _decider_columns(
    pending: Sequence[Sequence[ToolApprovalRequest]], decided: Mapping[str, Decision]
) -> dict[str, list[str | None]]:
    """``decided_by`` and ``via``: who decided the approvals each step waited for, and how."""
    if not decided or not any(pending):
        return {"decided_by": [None] * len(pending), "via": [None] * len(pending)}
    found = [_deciders(requests, decided) for requests in pending]
    return {"decided_by": [who for who, _ in found], "via": [via for _, via in found]}


def _deciders(
    requests: Sequence[ToolApprovalRequest], decided: Mapping[str, Decision]
) -> tuple[str | None, str | None]:
    """``decided_by`` and ``via`` of the verdicts on the approvals a step waited for."""
    sources = [
        source
        for r in requests
        if r.approval_id in decided and (source := decided[r.approval_id].source) is not None
    ]
    who = [who_decided(source) for source in sources if who_decided(source)]
    via = [source.via for source in sources if source.via]
    return ", ".join(dict.fromkeys(who)) or None, ", ".join(dict.fromkeys(via)) or None


def _cost_delta(now: float | None, before: float | None) -> float | None:
    if now is None:
        return None
    return now - (before or 0.0)


def message_rows(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """One row per message of a history."""
    return [message_row(position, message) for position, message in enumerate(messages)]


def message_row(position: int, message: Message) -> dict[str, Any]:
    """A message as one row: role, part types, previews of its text, tool calls and results."""
    calls = [p for p in message.content if isinstance(p, ToolCallPart)]
    results = [p for p in message.content if isinstance(p, ToolResultPart)]
    approvals = [p for p in message.content if isinstance(p, ApprovalRequestPart)]
    names = [p.tool_name for p in calls] + [p.tool_name for p in results]
    names += [p.request.tool_name for p in approvals]
    texts = [p.text for p in message.content if isinstance(p, TextPart)]
    return {
        "position": position,
        "role": message.role,
        "parts": ", ".join(dict.fromkeys(part.type for part in message.content)),
        "text": preview(" ".join(texts)) if texts else "",
        "tool_name": ", ".join(dict.fromkeys(names)),
        "tool_args": _joined_preview(
            [c.args for c in calls] or [a.request.input for a in approvals]
        ),
        "tool_result": _joined_preview([r.result for r in results]),
        "is_error": any(r.is_error for r in results),
        "images": sum(isinstance(p, ImagePart) for p in message.content),
    }


def _joined_preview(values: list[Any]) -> str:
    if not values:
        return ""
    return preview(values[0] if len(values) == 1 else values)


def event_rows(events: Iterable[Event]) -> list[dict[str, Any]]:
    """One row per logged event, with a one-line summary of its payload."""
    return [
        {
            "offset": event.offset,
            "type": event.type,
            "step_index": event.step_index,
            "operation_id": event.operation_id,
            "attempt_id": event.attempt_id,
            "summary": _summary(event),
            "created_at": event.created_at,
            "payload": event.payload,
        }
        for event in events
    ]


def _summary(event: Event) -> str:
    payload = event.payload
    if event.type == "model_delta":
        return preview(payload.get("delta", ""))
    if event.type == "tool_call_delta":
        return preview(f"{payload.get('tool_name', '')}: {payload.get('args_delta', '')}")
    if event.type == "run_state":
        reason = payload.get("reason")
        return str(payload.get("state")) + (f" ({reason})" if reason else "")
    for key in ("tool_call", "result", "request"):
        value = payload.get(key)
        if isinstance(value, dict):
            name = value.get("tool_name", "")
            detail = value.get("args", value.get("input", value.get("result")))
            return preview(f"{name} {json_text(detail)}")
    if event.type == "approval_resolved" or "approved" in payload:
        verdict = "approved" if payload.get("approved") else "denied"
        who = who_decided(payload.get("source"))
        return preview(
            " ".join(part for part in (str(payload.get("approval_id", "")), verdict, who) if part)
            + f" {payload.get('reason') or ''}"
        )
    if "message" in payload:
        return preview(f"{payload.get('error_type', '')}: {payload['message']}")
    if "finish_reason" in payload:
        return str(payload["finish_reason"])
    return preview({k: v for k, v in payload.items() if k != "response"}) if payload else ""
