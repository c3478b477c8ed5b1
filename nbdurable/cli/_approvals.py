"""``nbdurable runs approvals``: the approval requests of a store, the pending ones by default.

Reads :func:`nbdurable.inspect._approvals.approval_rows` (no pandas) and
prints a table fitted to the terminal, or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..inspect import _compact, _records
from ..inspect._approvals import approval_rows
from ._runs import Column, render_columns
from ._store import opened_store
from ._tables import terminal_width, text_width

__all__ = ["APPROVAL_LIST_COLUMNS", "list_approvals", "short_ids"]

_WAITING = ("pending", "expired")
"""What "pending" means in the inbox: no verdict yet (an expired token is still decidable)."""


def _call(row: dict[str, Any]) -> str:
    args = ", ".join(
        f"{k}={json.dumps(v, ensure_ascii=False, default=repr)}"
        for k, v in (row.get("arguments") or {}).items()
    )
    return f"{row.get('tool')}({args})"


def _waited(row: dict[str, Any]) -> str:
    start, waited = row.get("requested_at"), row.get("waited")
    if start is None or waited is None:
        return ""
    return _compact.age(start, start + waited)


def _who(row: dict[str, Any]) -> str:
    """Who decided, marked as claimed when the name was not authenticated."""
    by = row.get("decided_by")
    if by:
        return str(by) if row.get("authenticated") else f"{by} (claimed)"
    if row.get("addressed_to") or row.get("via") == "link":
        who = f"link to {row['addressed_to']}" if row.get("addressed_to") else "link"
        if row.get("minted_via") == "notify":
            return f"{who} (notification)"
        if row.get("minted_by"):
            claimed = "" if row.get("minted_via") == "http" else ", claimed"
            return f"{who} (minted by {row['minted_by']}{claimed})"
        return who
    return str(row.get("grant_id") or "")


APPROVAL_LIST_COLUMNS: tuple[Column, ...] = (
    Column("run", lambda r: r["run_id"], keep=True),
    Column("approval", lambda r: r["approval_id"], keep=True),
    Column("status", lambda r: r["status"], keep=True),
    Column("call", _call),
    Column("agent", lambda r: "/".join(r.get("agent_path") or ()), drop=20),
    Column("asked", lambda r: _records.local_time(r.get("requested_at"))[5:], drop=10),
    Column("waited", _waited, right=True, whole=True),
    Column("by", _who, drop=40),
    Column("via", lambda r: r.get("via"), drop=30),
    Column("reason", lambda r: r.get("reason")),
)
"""``runs approvals``' columns, most useful first. A narrow terminal loses asked,
agent, via and who decided in that order (empty ones first of all), then cuts
the call and the reason."""

_TIMES = ("requested_at", "decided_at")


def list_approvals(args: argparse.Namespace) -> int:
    """One line per approval request, oldest first: the pending ones, or every one with --all."""
    status = None if args.all else _WAITING
    with opened_store(args.store) as store:
        rows = approval_rows(store, run_id=args.run, status=status)
    if args.json:
        out = [
            {
                **row,
                "agent_path": list(row["agent_path"]),
                **{t: _records.iso(row.get(t)) for t in _TIMES},
            }
            for row in rows
        ]
        print(json.dumps(out, indent=2, ensure_ascii=False, default=str))
        return 0
    if not rows:
        what = "no approval requests" if args.all else "no pending approvals"
        where = f" in run {args.run} ({args.store})" if args.run else f" in {args.store}"
        print(what + where)
        return 0
    table = render_columns(APPROVAL_LIST_COLUMNS, rows)
    if max(map(text_width, table.splitlines())) >= terminal_width():
        # Too narrow for whole ids: a unique prefix (which approve and deny accept)
        # leaves the call readable, where a cut call (`drop_…`) tells nothing.
        short = short_ids([row["approval_id"] for row in rows])
        table = render_columns(
            APPROVAL_LIST_COLUMNS,
            [{**row, "approval_id": short[row["approval_id"]]} for row in rows],
        )
    print(table)
    return 0


def short_ids(ids: list[str], *, least: int = 8) -> dict[str, str]:
    """Each id cut to its shortest prefix that no other id of ``ids`` starts with.

    The prefix keeps ``least`` characters after the id's ``_`` at least.
    """
    short = {}
    for approval_id in ids:
        prefix = approval_id
        for end in range(approval_id.find("_") + 1 + least, len(approval_id)):
            if not any(o != approval_id and o.startswith(approval_id[:end]) for o in ids):
                prefix = approval_id[:end]
                break
        short[approval_id] = prefix
    return short
