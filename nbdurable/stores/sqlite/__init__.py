"""The SQLite store, the embedded default: one file, full history, linear storage.

Its private modules, one concept each: ``_store`` (the class: checkpoints and
the event log), ``_runs`` (the runtime's run records), ``_events`` (event rows),
``_heads`` (per-run heads), ``_crc`` (row checksums), ``_rows`` (row shapes),
``_schema`` (layout and migrations), ``_nowait`` (calls on the event loop's
thread, WAL checkpoints) and ``_errors`` (SQLite's errors, typed).
"""

from ._schema import SCHEMA_VERSION
from ._store import SqliteSessionStore

__all__ = ["SCHEMA_VERSION", "SqliteSessionStore"]
