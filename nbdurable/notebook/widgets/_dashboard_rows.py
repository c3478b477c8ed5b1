"""What the runs dashboard shows, as plain data: column specs, one page of rows, approvals.

Pure functions over the rows :mod:`nbdurable.inspect` builds (no widget, no store):
the dashboard calls them on every refresh and every sort, filter or page click, and
``benchmarks/dashboard_bench.py`` times them. A column is a :class:`Column` spec
(its key, label, kind, the raw value it sorts by and the text it shows), so a later
column (who decided, standing grants) is one more entry in :data:`COLUMNS`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ...inspect._compact import age, cost_text, why
from ...inspect._rows import json_text
from ...runs import (
    ACTIVE_STATES,
    HUMAN_STATES,
    RETRYABLE_STATES,
    STALLED,
    UNFINISHED_STATES,
    RuntimeRun,
    stalled,
)
from ._run_state import button_words

__all__ = [
    "COLUMNS",
    "FILTERS",
    "PAGE_SIZES",
    "Column",
    "Page",
    "PendingApproval",
    "Query",
    "RowCache",
    "RunRow",
    "approval_payload",
    "call_summary",
    "one_line",
    "page_of",
    "run_rows",
]

CellKind = Literal["id", "badge", "text", "number", "age", "long"]

CELL_CHARS = 160
"""Longest text a cell carries; the view cuts it to the column's width with an ellipsis."""
TITLE_CHARS = 4000
"""Longest full text a cell carries for its hover title."""
PAGE_SIZES = (10, 25, 50, 100)
"""Page sizes the view offers (a query may ask for any size from 1 to the largest)."""

FILTERS: dict[str, frozenset[str]] = {
    "unfinished": frozenset({*UNFINISHED_STATES, "suspended", STALLED}),
    "attention": frozenset({*HUMAN_STATES, "failed", "suspended", STALLED}),
}
"""Status filters beyond single statuses: runs not finished; runs a person should look at.

``stalled`` is the status a row shows for a ``running`` run whose owner stopped
(:func:`~nbdurable.runs.stalled`): it needs a look, not patience.
"""


def one_line(text: str, limit: int = CELL_CHARS) -> str:
    """``text`` on one line (whitespace collapsed), cut with "…" past ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class Column:
    """One column of the runs table.

    Attributes:
        key: The cell's key in a row's ``cells`` (and the sort key a query names).
        label: The header.
        kind: How the view draws it: ``id`` (monospace), ``badge`` (the status
            badge), ``text``, ``number`` (right-aligned), ``age`` (counted on in
            the view from the run's ``created_at``) or ``long`` (one line cut
            with an ellipsis, the full text on hover).
        value: The raw value rows sort by (None sorts last).
        text: What the cell shows.
        sortable: Whether a click on the header sorts by it.
    """

    key: str
    label: str
    kind: CellKind
    value: Callable[[Mapping[str, Any]], Any]
    text: Callable[[Mapping[str, Any]], str]
    sortable: bool = True

    def spec(self) -> dict[str, Any]:
        """The column as the view reads it (``key``, ``label``, ``kind``, ``sortable``)."""
        return {"key": self.key, "label": self.label, "kind": self.kind, "sortable": self.sortable}


def _text(key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda row: "" if row.get(key) is None else str(row[key])


def _count(key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda row: "" if row.get(key) is None else f"{int(row[key]):,}"


def _cost(row: Mapping[str, Any]) -> float | None:
    cost = row.get("cost")
    return None if cost is None or cost != cost else float(cost)  # NaN: unknown


COLUMNS: tuple[Column, ...] = (
    Column("run_id", "run", "id", lambda r: r["run_id"], _text("run_id")),
    Column("status", "status", "badge", lambda r: r["status"], _text("status")),
    Column("agent", "agent", "text", lambda r: r.get("agent") or None, _text("agent")),
    Column("steps", "steps", "number", lambda r: r.get("steps"), _count("steps")),
    Column("tokens", "tokens", "number", lambda r: r.get("total_tokens"), _count("total_tokens")),
    Column("cost", "cost", "number", _cost, lambda r: cost_text(_cost(r))),
    # the youngest run has the least age: ascending is newest first (in submission order)
    Column("age", "age", "age", lambda r: -r["order"], lambda r: r["age"]),
    Column("reason", "reason", "long", lambda r: r["why"] or None, _text("why")),
    # (``why`` is the compact view's reason, with the last error of a run that stopped on one)
)
"""The runs table's columns, left to right."""


STOPPED_ON_ERROR = RETRYABLE_STATES | {"retry_wait"}
_TIMED = ACTIVE_STATES | {"retry_wait"}
"""States whose row depends on the time: a retry's countdown, a lease that may run out."""


def _why(row: dict[str, Any], record: RuntimeRun | None) -> str:
    """What the run waits for or why it stopped: the words of ``%durable runs``, and the error."""
    reason = button_words(why(row, record))
    error = record.error if record is not None else None
    if error and row.get("status") in STOPPED_ON_ERROR and error not in reason:
        return f"{reason}: {error}" if reason else error
    return reason


@dataclass(frozen=True)
class RunRow:
    """One run as the dashboard holds it between refreshes.

    Attributes:
        run_id: The run.
        status: Its status (the runtime state, else the latest checkpoint's).
        created_at: When it was submitted (epoch ms): the view counts its age on.
        runtime: Whether the runtime keeps a record of it (it can show a live view).
        order: Its place among the runs, oldest first (submission order).
        values: The raw sort value of each column.
        cells: The text of each column, one line each.
        titles: The full text of cells that were cut, for the hover title.
        haystack: What a text search looks in (lower case).
    """

    run_id: str
    status: str
    created_at: int
    runtime: bool
    order: int
    values: dict[str, Any]
    cells: dict[str, str]
    titles: dict[str, str]
    haystack: str

    def payload(self) -> dict[str, Any]:
        """The row as the view reads it (no secret: nothing here comes from a token)."""
        return {
            "id": self.run_id,
            "status": self.status,
            "created_at": self.created_at,
            "live": self.runtime,
            "cells": self.cells,
            "titles": self.titles,
        }


RowCache = dict[str, tuple[Any, "RunRow"]]
"""Rows built by an earlier :func:`run_rows` call, by run id, with what they were built from."""


def run_rows(
    rows: Iterable[Mapping[str, Any]],
    runtime: Iterable[RuntimeRun],
    *,
    columns: Sequence[Column] = COLUMNS,
    now_ms: int | None = None,
    cache: RowCache | None = None,
) -> list[RunRow]:
    """The dashboard's rows from :mod:`nbdurable.inspect`'s full run rows.

    Args:
        rows: Full rows (``nbdurable.inspect._records.run_rows``), one per run,
            oldest first.
        runtime: The runtime's records of those runs (the reason a run waits).
        columns: The columns to compute.
        now_ms: The time ages are counted to (now when None).
        cache: Rows built by the previous call, kept up to date here: a run
            whose row and record did not change keeps its row (and the age
            text of that call: the view counts ages on by itself).
    """
    by_id = {r.run_id: r for r in runtime}
    now = int(time.time() * 1000) if now_ms is None else now_ms
    built: list[RunRow] = []
    for order, row in enumerate(rows):
        record = by_id.get(row["run_id"])
        source = (order, tuple(row.values()), record)
        if cache is not None:
            cached = cache.get(row["run_id"])
            # a retry's countdown and a running run's lease are read again at every read
            if cached is not None and cached[0] == source and row["status"] not in _TIMED:
                built.append(cached[1])
                continue
        made = _run_row(row, record, order, columns, now)
        if cache is not None:
            cache[made.run_id] = (source, made)
        built.append(made)
    if cache is not None and len(cache) > len(built):
        kept = {r.run_id for r in built}
        for run_id in [k for k in cache if k not in kept]:
            del cache[run_id]
    return built


def _run_row(
    row: Mapping[str, Any],
    record: RuntimeRun | None,
    order: int,
    columns: Sequence[Column],
    now_ms: int,
) -> RunRow:
    full = dict(row)
    if record is not None and stalled(record, now_ms) is not None:
        full["status"] = STALLED  # the record says running; nobody runs it
    full["order"] = order
    full["why"] = _why(full, record)
    full["age"] = age(row.get("created_at"), now_ms)
    cells: dict[str, str] = {}
    titles: dict[str, str] = {}
    for column in columns:
        text = column.text(full)
        cells[column.key] = one_line(text)
        if cells[column.key] != text:
            titles[column.key] = text[:TITLE_CHARS]
    search = (row["run_id"], row.get("agent"), full["status"], full["why"], row.get("session_id"))
    return RunRow(
        run_id=row["run_id"],
        status=str(full["status"]),
        created_at=int(row.get("created_at") or 0),
        runtime=record is not None,
        order=order,
        values={column.key: column.value(full) for column in columns},
        cells=cells,
        titles=titles,
        haystack=" ".join(str(part) for part in search if part).lower(),
    )


@dataclass(frozen=True)
class Query:
    """What the view asks for: a filter, a search, an order and a page.

    Attributes:
        status: ``""`` (every run), a status, or a key of :data:`FILTERS`.
        search: Words that must all appear in the run id, agent, status,
            reason or session (case-insensitive).
        sort_by: The key of a sortable column.
        descending: Sort the other way.
        page: The page, from 0.
        page_size: Rows per page.
    """

    status: str = ""
    search: str = ""
    sort_by: str = "age"
    descending: bool = False
    page: int = 0
    page_size: int = 25

    def updated(self, changes: Mapping[str, Any], columns: Sequence[Column] = COLUMNS) -> Query:
        """The query with the valid ``changes`` a front end sent (the others are ignored).

        A new filter, search or order goes back to the first page.
        """
        query = self
        sortable = {c.key for c in columns if c.sortable}
        if isinstance(changes.get("status"), str):
            query = replace(query, status=changes["status"][:40], page=0)
        if isinstance(changes.get("search"), str):
            query = replace(query, search=changes["search"][:200], page=0)
        if changes.get("sort_by") in sortable:
            query = replace(query, sort_by=changes["sort_by"], page=0)
        if isinstance(changes.get("descending"), bool):
            query = replace(query, descending=changes["descending"], page=0)
        size = changes.get("page_size")
        if isinstance(size, int) and not isinstance(size, bool):
            query = replace(query, page_size=min(max(size, 1), PAGE_SIZES[-1]), page=0)
        page = changes.get("page")
        if isinstance(page, int) and not isinstance(page, bool):
            query = replace(query, page=max(page, 0))
        return query


@dataclass(frozen=True)
class Page:
    """One page of the runs table.

    Attributes:
        rows: The page's rows, as the view reads them.
        total: How many runs match the filter and the search.
        page: The page shown (clamped to the last one).
        pages: How many pages there are (at least 1).
        counts: How many runs have each status (the whole store, unfiltered).
    """

    rows: list[dict[str, Any]]
    total: int
    page: int
    pages: int
    counts: dict[str, int] = field(default_factory=dict)


def _matches(row: RunRow, statuses: frozenset[str] | None, words: list[str]) -> bool:
    if statuses is not None and row.status not in statuses:
        return False
    return all(word in row.haystack for word in words)


def page_of(rows: Sequence[RunRow], query: Query) -> Page:
    """Filter, search, sort and cut ``rows`` to the page ``query`` asks for.

    Rows with no value in the sorted column come last either way; ties keep
    the newest run first.
    """
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.status] = counts.get(row.status, 0) + 1
    statuses = FILTERS.get(query.status) or (frozenset({query.status}) if query.status else None)
    words = query.search.lower().split()
    found = [r for r in rows if _matches(r, statuses, words)]
    found.sort(key=lambda r: -r.order)  # ties: newest first
    blank = [r for r in found if r.values.get(query.sort_by) is None]
    valued = [r for r in found if r.values.get(query.sort_by) is not None]
    valued.sort(key=lambda r: r.values[query.sort_by], reverse=query.descending)
    ordered = valued + blank
    pages = max(1, -(-len(ordered) // query.page_size))
    page = min(query.page, pages - 1)
    start = page * query.page_size
    shown = [r.payload() for r in ordered[start : start + query.page_size]]
    return Page(rows=shown, total=len(ordered), page=page, pages=pages, counts=counts)


def call_summary(tool_name: str, args: Mapping[str, Any]) -> str:
    """A tool call as one reads it: ``drop_table(name="stg_2023")``."""
    return f"{tool_name}({', '.join(f'{k}={json_text(v)}' for k, v in args.items())})"


@dataclass(frozen=True)
class PendingApproval:
    """A call a run waits to have approved, without its token (which stays in the kernel).

    Attributes:
        run_id: The run that waits.
        approval_id: The approval.
        tool_name: The gated tool.
        args: Its arguments.
        agent: The run's agent, then the sub-agent path (``janitor > cleaner``).
        requested_at: When it was asked (epoch ms).
        allow_edit: Whether the tool lets a person edit the call's arguments.
        parameters: With ``allow_edit``: the tool's JSON schema (the Edit form's fields).
    """

    run_id: str
    approval_id: str
    tool_name: str
    args: dict[str, Any]
    agent: str
    requested_at: int
    allow_edit: bool = False
    parameters: dict[str, Any] | None = None


def approval_payload(
    approval: PendingApproval,
    state: str,
    message: str,
    answered_at: int = 0,
    *,
    token_expired: bool = False,
) -> dict[str, Any]:
    """One approval row as the view reads it: what is asked, where, when, and its outcome.

    ``state`` is ``pending``, ``sending`` (a verdict is being checked), or the
    state of the outcome (``approved``, ``denied``, ``stale``, ``invalid token``,
    ``expired``, ``error``); ``message`` is the outcome's line and ``answered_at`` when it
    came (epoch ms; 0 while none did). ``token_expired``: the request's token is past
    the maximum age (the inbox's ``expired``); Approve signs a fresh one. ``args``
    prefill the Edit form (offered when ``allow_edit``, its fields from ``parameters``).
    """
    call = call_summary(approval.tool_name, approval.args)
    return {
        "run_id": approval.run_id,
        "approval_id": approval.approval_id,
        "tool": approval.tool_name,
        "call": one_line(call),
        "call_full": call[:TITLE_CHARS],
        "agent": approval.agent,
        "requested_at": approval.requested_at,
        "state": state,
        "message": message,
        "answered_at": answered_at,
        "token_expired": token_expired,
        "args": approval.args,
        "allow_edit": approval.allow_edit,
        "parameters": approval.parameters if approval.allow_edit else None,
    }
