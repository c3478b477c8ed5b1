"""The PostgreSQL store: the SQLite store's model on a shared server, through a pool.

Its private modules, one concept each: ``_store`` (the class: a composition of
the parts below, and the event log), ``_db`` (the schema's connection: pool and
transactions), ``_checkpoints`` (checkpoints over one message chain), ``_runs``
(the runtime's run records), ``_sql`` (statements), ``_schema`` (layout and
migrations), ``_connect`` (driver, DSN, pool) and ``_listen``
(``LISTEN``/``NOTIFY``). psycopg is imported only when a store is created, so
the class can be named without the extra installed.
"""

from ._schema import SCHEMA_VERSION
from ._store import PostgresSessionStore

__all__ = ["SCHEMA_VERSION", "PostgresSessionStore"]
