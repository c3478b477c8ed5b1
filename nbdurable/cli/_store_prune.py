"""``nbdurable store prune``: delete finished runs older than a date or an age."""

from __future__ import annotations

import argparse
import json
import re
import time
from datetime import UTC, datetime
from typing import Any

from .._errors import ConfigurationError
from ._store import add_store_url, default_store, opened_store

__all__ = ["add_parser", "cutoff_ms", "parse_age", "prune"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def parse_age(text: str) -> float:
    """Seconds in an age such as ``30d``, ``12h``, ``90m``, ``2w`` or ``45s``."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if found is None:
        raise ConfigurationError(
            f"--older-than {text!r}: give a number and a unit, e.g. 30d, 12h, 90m, 2w"
        )
    return float(found.group(1)) * _UNITS[found.group(2)]


def _parse_date(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigurationError(
            f"--finished-before {text!r}: give an ISO date or time, e.g. 2026-01-31 "
            "or 2026-01-31T12:00+01:00"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def cutoff_ms(args: argparse.Namespace, now: float | None = None) -> int:
    """The cut-off of ``--finished-before`` or ``--older-than``, epoch milliseconds."""
    if args.finished_before is not None:
        return int(_parse_date(args.finished_before).timestamp() * 1000)
    now = time.time() if now is None else now
    return int((now - parse_age(args.older_than)) * 1000)


def add_parser(actions: Any) -> None:
    """Add ``store prune`` to the ``store`` command's actions."""
    sub = actions.add_parser(
        "prune",
        help="delete finished runs older than a date or an age, and reclaim the space",
        description=(
            "Delete the runs that finished (completed, failed or cancelled) before a date "
            "or an age, with their checkpoints, events and run records, then reclaim the "
            "space (SQLite: VACUUM). An unfinished run, or one tied to an unfinished run "
            "(its graph, its task), is never deleted."
        ),
    )
    add_store_url(sub)
    when = sub.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--finished-before",
        metavar="DATE",
        help="ISO date or time (UTC unless it says otherwise), e.g. 2026-01-31",
    )
    when.add_argument("--older-than", metavar="AGE", help="finished this long ago: 30d, 12h, 2w")
    sub.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")
    sub.add_argument("--json", action="store_true", help="print the report as JSON")
    sub.set_defaults(handler=prune)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def prune(args: argparse.Namespace) -> int:
    """Prune the store; prints one line per run and a summary."""
    url = args.url or (args.store if getattr(args, "store", None) else default_store())
    before = cutoff_ms(args)
    with opened_store(url) as store:
        report = store.prune(before, dry_run=args.dry_run)
    if args.json:
        print(
            json.dumps(
                {
                    "store": url,
                    "finished_before": _when(before),
                    "dry_run": report.dry_run,
                    "runs": [
                        {
                            "run_id": run.run_id,
                            "status": run.status,
                            "finished_at": _when(run.finished_at),
                            "stored_runs": list(run.stored_runs),
                        }
                        for run in report.runs
                    ],
                    "reclaimed": report.reclaimed,
                },
                indent=2,
            )
        )
        return 0
    for run in report.runs:
        extra = len(run.stored_runs) - 1
        children = f" (+{extra} sub-agent run(s))" if extra > 0 else ""
        print(f"  {run.run_id}  {run.status}  finished {_when(run.finished_at)}{children}")
    count = len(report.runs)
    if report.dry_run:
        print(f"Would delete {count} run(s) finished before {_when(before)} (dry run).")
    else:
        print(f"Deleted {count} run(s) finished before {_when(before)}.")
        if report.reclaimed:
            print(f"Space: {report.reclaimed}")
    return 0
