"""Per-run counts that make a missing row an error (schema version 7).

A checksum (:mod:`._crc`) catches a damaged row, not a row that is gone:
a zeroed page, two swapped pages or a damaged index entry can hide rows without
SQLite noticing, and a read would return fewer. So each run has one row in
``run_heads`` that says what the run has, written in the transaction that adds
it: its last event offset, how many tool intents and journaled responses it
holds, and whether it has a runtime record. A read compares what it found with
it, and fewer is a :class:`~nbdurable.StoreCorruptionError` naming the run.
(Checkpoints need none: the run's row in ``runs`` numbers them, see ``last_seq``.)
A graph has a head too, keyed by a NUL, ``graph``, a NUL and the graph id, whose
``record`` counts its runs: ``rt_graph`` reads them through the graph index alone.

A run written before version 7 has no head until its next write, which counts
its rows then; until that, its reads are checked as before.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ..._errors import StoreCorruptionError
from ._crc import row_crc, verify_row

__all__ = [
    "CREATE_HEADS",
    "Head",
    "forget_head",
    "graph_nodes",
    "read_head",
    "update_graph",
    "update_head",
]

CREATE_HEADS = """
CREATE TABLE IF NOT EXISTS run_heads (
    run_id TEXT PRIMARY KEY,
    events INTEGER NOT NULL,
    intents INTEGER NOT NULL,
    journal INTEGER NOT NULL,
    record INTEGER NOT NULL,
    crc INTEGER NOT NULL
) WITHOUT ROWID
"""
_READ = "SELECT events, intents, journal, record, crc FROM run_heads WHERE run_id = ?"
_WRITE = (
    "INSERT OR REPLACE INTO run_heads (run_id, events, intents, journal, record, crc) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
# What a run written before version 7 has, counted at its first write since.
_COUNT = """
SELECT max(coalesce((SELECT max(position) FROM event_batches WHERE run_id = ?1), 0),
           coalesce((SELECT max(position) FROM events WHERE run_id = ?1), 0)),
       (SELECT count(*) FROM rt_intents WHERE run_id = ?1),
       (SELECT count(*) FROM rt_journal WHERE run_id = ?1),
       EXISTS (SELECT 1 FROM rt_runs WHERE run_id = ?1)
"""


@dataclass
class Head:
    """What a run has: its last event offset, intents, journaled steps, a runtime record."""

    events: int = 0
    intents: int = 0
    journal: int = 0
    record: int = 0

    def short(self, run_id: str, what: str, found: int, wanted: int) -> StoreCorruptionError:
        """The error for a read that found ``found`` of the ``wanted`` the head records."""
        return StoreCorruptionError(
            f"{what} of run {run_id!r} cannot be read: found {found} of {wanted}",
            run_id=run_id,
        )


def read_head(conn: sqlite3.Connection, run_id: str) -> Head | None:
    """The run's head, verified; None when the run has none.

    Raises:
        StoreCorruptionError: The head row is damaged.
    """
    found = conn.execute(_READ, (run_id,)).fetchone()
    if found is None:
        return None
    values = (run_id, *found[:-1])
    verify_row("run_heads", values, found[-1], run_id, "the head row")
    if not all(type(v) is int for v in found[:-1]):
        raise StoreCorruptionError(f"the head row of run {run_id!r} is damaged", run_id=run_id)
    return Head(*found[:-1])


def update_head(
    conn: sqlite3.Connection,
    run_id: str,
    *,
    events: int | None = None,
    intents: int = 0,
    journal: int = 0,
    record: bool = False,
    head: Head | None = None,
) -> None:
    """Add to the run's head inside a write (``events``: the new last offset).

    ``head``: the run's head as this write already read it (None: read it here).
    """
    head = head if head is not None else read_head(conn, run_id)
    if head is None:
        head = Head(*conn.execute(_COUNT, (run_id,)).fetchone())
        head.intents -= intents  # the rows just written are counted already
        head.journal -= journal
    if events is not None:
        head.events = events
    head.intents += intents
    head.journal += journal
    head.record = int(head.record or record)
    values = (run_id, head.events, head.intents, head.journal, head.record)
    conn.execute(_WRITE, (*values, row_crc("run_heads", values)))


def forget_head(conn: sqlite3.Connection, run_id: str) -> None:
    """Delete the run's head (the run is being deleted)."""
    conn.execute("DELETE FROM run_heads WHERE run_id = ?", (run_id,))


def _graph_key(graph_id: str) -> str:
    # Not a run id anyone submits (a NUL): a graph's head shares the table.
    return f"\x00graph\x00{graph_id}"


def graph_nodes(conn: sqlite3.Connection, graph_id: str) -> int | None:
    """How many runs the graph's head says it has (in its ``record`` column); None: no head.

    Raises:
        StoreCorruptionError: The head row is damaged.
    """
    head = read_head(conn, _graph_key(graph_id))
    return None if head is None else head.record


def update_graph(conn: sqlite3.Connection, graph_id: str, added: int) -> None:
    """Add ``added`` (negative: remove) to the graph's count, after writing its rows."""
    key = _graph_key(graph_id)
    head = read_head(conn, key)
    if head is None:  # first write since version 7: count what is there (this write included)
        (count,) = conn.execute(_GRAPH_COUNT, (graph_id,)).fetchone()
    else:
        count = head.record + added
    values = (key, 0, 0, 0, count)
    conn.execute(_WRITE, (*values, row_crc("run_heads", values)))


_GRAPH_COUNT = "SELECT count(*) FROM rt_runs WHERE graph_id = ?"
