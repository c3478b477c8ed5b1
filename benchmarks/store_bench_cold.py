"""Cold load of a long run's latest checkpoint against its floor, in one process.

The floor reads the same rows the store reads (the checkpoint's head, then its
message chain with the same recursive query) on a fresh connection, unpacks each
message the way the store does (since schema version 5 a node holds its JSON
deflated with a preset dictionary: ``unpack_json`` inflates it) and parses it
with ``json.loads``: what any reader of those bytes pays. The inflate is in both
figures, so it pulls the ratio toward 1 (about 1-2 us a message).
The load is ``SqliteSessionStore.load`` on a freshly opened store (nothing
cached), which also checks every node's hash and builds the messages.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import nbdurable as nd
from nbdurable.stores._packing import unpack_json

# The same rows the store reads: the latest checkpoint's head, then its chain.
_HEAD = "SELECT head, message_count FROM checkpoints WHERE run_id = ? ORDER BY seq DESC LIMIT 1"
_CHAIN = """
WITH RECURSIVE chain(id, parent, message, depth) AS (
    SELECT id, parent, message, 1 FROM nodes WHERE id = ?
    UNION ALL
    SELECT n.id, n.parent, n.message, chain.depth + 1
    FROM nodes n JOIN chain ON n.id = chain.parent
    WHERE chain.depth < ?
)
SELECT id, parent, message FROM chain
"""


@dataclass
class ColdLoad:
    """Medians (ms) over the repeats; ``ratio`` is load / floor."""

    messages: int
    repeats: int
    floor_ms: float
    floor_sql_ms: float  # of which the SQL
    load_ms: float

    @property
    def ratio(self) -> float:
        return self.load_ms / self.floor_ms


def floor_once(db: Path, run_id: str) -> tuple[float, float, int]:
    """One floor read: (total ms, SQL ms, messages parsed)."""
    conn = sqlite3.connect(db)
    try:
        started = time.perf_counter()
        head, count = conn.execute(_HEAD, (run_id,)).fetchone()
        rows = conn.execute(_CHAIN, (head, count)).fetchall()
        read = time.perf_counter()
        parsed = [json.loads(unpack_json(text)) for _, _, text in rows]
        done = time.perf_counter()
    finally:
        conn.close()
    return (done - started) * 1000, (read - started) * 1000, len(parsed)


def load_once(db: Path, run_id: str) -> tuple[float, int]:
    """One cold load on a freshly opened store: (ms, messages)."""
    store = nd.SqliteSessionStore(db)
    try:
        started = time.perf_counter()
        checkpoint = store.load(run_id)
        took = (time.perf_counter() - started) * 1000
    finally:
        store.close()
    assert checkpoint is not None
    return took, len(checkpoint.messages)


def cold_load(db: Path, run_id: str, repeats: int = 21) -> ColdLoad:
    """Floor and load, interleaved so that both see the same machine load."""
    floors: list[tuple[float, float]] = []
    loads: list[float] = []
    count = 0
    for i in range(repeats + 2):
        total, sql, parsed = floor_once(db, run_id)
        took, count = load_once(db, run_id)
        assert parsed == count, (parsed, count)
        if i >= 2:  # the first rounds warm the OS page cache and the imports
            floors.append((total, sql))
            loads.append(took)
    return ColdLoad(
        messages=count,
        repeats=repeats,
        floor_ms=statistics.median(f[0] for f in floors),
        floor_sql_ms=statistics.median(f[1] for f in floors),
        load_ms=statistics.median(loads),
    )
