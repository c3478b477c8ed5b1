"""Recompute the row checksums of an SQLite store file after a test edited its rows.

Tests that write rows by hand (a newer release's values, a value that hashes right
but does not decode) stand for a writer that checksums what it writes; without
this, the checksum (schema version 7) would refuse the row before the code the
test is about reads it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nbdurable.stores.sqlite._crc import CHECKSUMMED, row_crc

_PRIMARY = {"checkpoints": 2, "event_batches": 2, "rt_intents": 2, "rt_journal": 2}
"""How many leading columns of :data:`CHECKSUMMED` make each table's key (1 when not listed)."""


def reseal(path: str | Path) -> None:
    """Set every row's ``crc`` to the checksum of its values as they are now."""
    conn = sqlite3.connect(path)
    conn.text_factory = bytes
    try:
        for table, columns in CHECKSUMMED.items():
            keys = columns[: _PRIMARY.get(table, 1)]
            where = " AND ".join(f"{key} = ?" for key in keys)
            for values in conn.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall():
                crc = row_crc(table, values)
                # Keys are text: bound as bytes they would be blobs, equal to no text.
                key = [v.decode() if isinstance(v, bytes) else v for v in values[: len(keys)]]
                conn.execute(f"UPDATE {table} SET crc = ? WHERE {where}", (crc, *key))
        conn.commit()
    finally:
        conn.close()
