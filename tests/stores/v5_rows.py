"""Event logs as schema version 5 wrote them (one packed row per event), for tests.

Version 6 writes a commit's events as one batch (:mod:`nbdurable.stores.sqlite._events`)
and still reads the rows of files written before it: these helpers make such rows.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import nbdurable as nd
from nbdurable.stores._packing import pack_attempt, pack_json, pack_operation, pack_type
from nbdurable.stores.sqlite._rows import compact_json


def _v5_row(event: nd.Event) -> tuple[object, ...]:
    """An event's ``events`` row as schema version 5 wrote it."""
    run_id, step = event.run_id, event.step_index
    return (
        run_id,
        event.offset,
        pack_type(event.type),
        step,
        pack_operation(event.operation_id, run_id, step),
        pack_attempt(event.attempt_id),
        pack_json(compact_json(event.payload)),
        event.created_at,
    )


def as_version_5(path: Path, run_id: str) -> list[nd.Event]:
    """Rewrite a run's event log as version 5 wrote it: one packed row per event."""
    with nd.SqliteSessionStore(path) as store:
        events = store.read_events(run_id)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("DELETE FROM event_batches WHERE run_id = ?", (run_id,))
        conn.executemany(
            "INSERT INTO events (run_id, position, type, step_index, operation_id, attempt_id, "
            "payload, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [_v5_row(e) for e in events],
        )
    finally:
        conn.close()
    return events
