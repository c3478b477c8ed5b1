"""The SQLite store, the embedded default: one file, full history, linear storage.

Its private modules, one concept each: ``_store`` (the class: a composition of
the parts below), ``_db`` (the file's connection: transactions, calls on the
event loop's thread, WAL checkpoints), ``_checkpoints`` (checkpoints over one
message chain), ``_runs`` (the runtime's run records), ``_events`` (event rows),
``_heads`` (per-run heads), ``_crc`` (row checksums), ``_rows`` (row shapes),
``_schema`` (layout and migrations) and ``_errors`` (SQLite's errors, typed).
"""

from ._schema import SCHEMA_VERSION
from ._store import SqliteSessionStore

__all__ = ["SCHEMA_VERSION", "SqliteSessionStore"]
