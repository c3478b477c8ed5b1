"""``nbdurable store check`` for what schema version 7 adds: row checksums and run heads.

Every check here reads tables by full scan (``NOT INDEXED``), so it sees the rows
as they are on their pages, then compares:

- each row's ``crc`` with the checksum of its values (:mod:`.sqlite._crc`);
- each run's head (:mod:`.sqlite._heads`) with the rows the run has;
- how many rows of each run a lookup by run id finds (through the table's
  index, as the store reads them) with how many the scan found.

So every run the store refuses to read is named here too, whether a row's
value, a row that is gone or an index entry is what was damaged.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable
from typing import Any

from ._check import CheckReport
from .sqlite._crc import CHECKSUMMED, row_crc

__all__ = ["check_checksums"]

_LABELS = {
    "runs": "its run row",
    "checkpoints": "checkpoint (save {})",
    "event_batches": "its events up to {}",
    "rt_runs": "its run record",
    "rt_intents": "tool intent {}",
    "rt_journal": "the journaled response of step {}",
    "run_heads": "its head row",
}


_GRAPH = "\x00graph\x00"  # a graph's head in run_heads (see sqlite._heads)


def _name(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _scan(conn: sqlite3.Connection, table: str) -> list[tuple[Any, ...]]:
    columns = ", ".join((*CHECKSUMMED[table], "crc"))
    return conn.execute(f"SELECT {columns} FROM {table} NOT INDEXED").fetchall()


def check_checksums(conn: sqlite3.Connection, report: CheckReport) -> None:
    """Add to ``report`` every row whose checksum, head or index entry disagrees.

    ``conn`` reads text as bytes, inside the check's snapshot; the schema is at
    version 7 or later.
    """
    try:
        legacy = bool(conn.execute("SELECT legacy_rows FROM nbdurable_checksums").fetchone()[0])
    except (sqlite3.DatabaseError, TypeError) as exc:
        report.add(f"cannot read whether rows older than checksums may be there ({exc})")
        legacy = False
    scanned: dict[str, list[tuple[Any, ...]]] = {}
    for table in CHECKSUMMED:
        try:
            scanned[table] = _scan(conn, table)
        except sqlite3.DatabaseError as exc:
            report.add(f"cannot read the {table} table for its checksums ({exc})")
            continue
        bad = 0
        for row in scanned[table]:
            *values, crc = row
            if crc is None and legacy and table != "run_heads":
                continue
            if type(crc) is not int or crc != row_crc(table, values):
                bad += 1
                what = _LABELS[table].format(_name(values[1]))
                report.add(f"{what} is damaged: its checksum does not match", _name(values[0]))
        report.count("row checksums", len(scanned[table]) - bad)
    try:  # events of schema 5 and before, which a head counts too
        legacy_events = conn.execute(
            "SELECT run_id, max(position) FROM events NOT INDEXED GROUP BY run_id"
        ).fetchall()
    except sqlite3.DatabaseError as exc:
        report.add(f"cannot read the events table for the run heads ({exc})")
        legacy_events = []
    _heads(scanned, report, legacy, legacy_events)
    for table in ("runs", "checkpoints", "event_batches", "rt_runs", "rt_intents", "rt_journal"):
        if table in scanned:
            _lookups(conn, table, scanned[table], report)


def _heads(
    scanned: dict[str, list[tuple[Any, ...]]],
    report: CheckReport,
    legacy: bool,
    legacy_events: list[tuple[Any, ...]],
) -> None:
    """Compare each run's head with the rows the scans found."""
    if "run_heads" not in scanned:
        return
    last: dict[str, int] = {_name(run_id): top for run_id, top in legacy_events if type(top) is int}
    for row in scanned.get("event_batches", []):
        if type(row[1]) is int:
            last[_name(row[0])] = max(last.get(_name(row[0]), 0), row[1])
    intents = Counter(_name(row[0]) for row in scanned.get("rt_intents", []))
    journal = Counter(_name(row[0]) for row in scanned.get("rt_journal", []))
    records = {_name(row[0]) for row in scanned.get("rt_runs", [])}
    heads = {_name(row[0]): row[1:5] for row in scanned["run_heads"]}
    graphs = Counter(_name(row[7]) for row in scanned.get("rt_runs", []) if row[7] is not None)
    graph_heads = [k for k in heads if k.startswith(_GRAPH)]
    for key in graph_heads:
        graph_id, nodes = key[len(_GRAPH) :], heads.pop(key)[3]
        if nodes != graphs[graph_id]:
            report.add(f"graph {graph_id!r}: its head says {nodes} runs, {graphs[graph_id]} found")
    names = ("last event", "tool intents", "journaled responses", "run record")
    for run_id, head in heads.items():
        have = (last.get(run_id, 0), intents[run_id], journal[run_id], int(run_id in records))
        differ = [
            f"{n} {h} (found {f})" for n, h, f in zip(names, head, have, strict=True) if h != f
        ]
        if differ:
            report.add(f"its head row says {', '.join(differ)}", run_id)
    if not legacy:
        for graph_id in sorted(set(graphs) - {k[len(_GRAPH) :] for k in graph_heads}):
            report.add(f"graph {graph_id!r}: its head row is missing")
        with_rows = set(last) | set(intents) | set(journal) | records
        for run_id in sorted(with_rows - set(heads)):
            report.add("its head row is missing", run_id)


def _lookups(
    conn: sqlite3.Connection, table: str, rows: Iterable[tuple[Any, ...]], report: CheckReport
) -> None:
    """Report each run whose rows a lookup by run id (through an index) does not all find."""
    counts = Counter(_name(row[0]) for row in rows)
    for run_id, count in counts.items():
        try:
            (found,) = conn.execute(
                f"SELECT count(*) FROM {table} WHERE run_id = ?", (run_id,)
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            report.add(f"cannot look up its rows in {table} ({exc})", run_id)
            continue
        if found != count:
            report.add(
                f"a lookup of its rows in {table} finds {found} of {count} (a damaged index)",
                run_id,
            )
