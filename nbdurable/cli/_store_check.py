"""``nbdurable store check [URL]``: what is damaged in a store, and which runs it affects.

Exit status: 0 when nothing is damaged, 1 when something is (the report says
what and which runs), 2 when the check could not run (no such store, a bad URL).
"""

from __future__ import annotations

import argparse
import json
import shutil
import textwrap
from typing import Any

from . import _store_prune as store_prune
from ._store import add_store_url, default_store

__all__ = ["DAMAGED", "add_parser", "check"]

DAMAGED = 1
"""Exit status when the check found damage."""
_SHOWN = 50
"""Damage lines printed at most (``--json`` lists all)."""


def add_parser(commands: Any) -> None:
    """Add ``store check`` (and ``store prune``) to the command line."""
    parser = commands.add_parser("store", help="check a store for damage, prune finished runs")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub = actions.add_parser(
        "check",
        help="verify a store: file integrity, message hashes, every checkpoint and event",
        description=(
            "Verify a store without writing to it: SQLite's integrity check, every message "
            "chain's hashes, every checkpoint's metadata, the latest checkpoint of every run, "
            "the event log and the runtime's records. Exit status: 0 clean, 1 damaged, "
            "2 when the check could not run."
        ),
    )
    add_store_url(sub)
    sub.add_argument("--json", action="store_true", help="print the report as JSON")
    sub.set_defaults(handler=check)
    store_prune.add_parser(actions)


def check(args: argparse.Namespace) -> int:
    """Check the store and print the report; returns the exit status."""
    from ..stores import missing_path, open_store
    from ..stores._check import check_store

    url = args.url or (args.store if getattr(args, "store", None) else default_store())
    if missing_path(url) is not None:
        open_store(url, create=False)  # raises the error every reading command gives
    report = check_store(url)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
        return 0 if report.clean else DAMAGED
    counts = ", ".join(f"{n} {name}" for name, n in report.counts.items()) or "nothing readable"
    width = min(shutil.get_terminal_size().columns, 100)
    print(f"Checked {report.store}:")
    print(textwrap.fill(f"{counts}.", width, initial_indent="  ", subsequent_indent="  "))
    for note in report.notes:
        print(f"Note: {note}")
    if report.clean:
        print("OK: no damage found.")
        return 0
    affected = report.affected_runs
    # Damage outside any one run's rows (a table that cannot be read) says nothing
    # of which runs it hides: "0 run(s) affected" would read as "none".
    unknown = any(d.run_id is None for d in report.damage)
    if unknown:
        which = f"{len(affected)} run(s) named, others may be" if affected else "any run may be"
        print(f"DAMAGED: {len(report.damage)} problem(s), {which} affected.")
    else:
        print(f"DAMAGED: {len(report.damage)} problem(s), {len(affected)} run(s) affected.")
    lines = report.lines()
    for line in lines[:_SHOWN]:
        print(f"  {line}")
    if len(lines) > _SHOWN:
        print(f"  ... and {len(lines) - _SHOWN} more (--json lists all)")
    if affected:
        print(f"Affected runs: {', '.join(affected)}")
    after = "" if unknown else "; runs not listed read as before"
    print(
        "What to do: stop the processes using the store, keep a copy of it as it is, and "
        f"restore it from a backup{after}. See 'Broken store files' in docs/stores.md."
    )
    return DAMAGED
