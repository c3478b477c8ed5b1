"""The PostgreSQL store's schema and its versioned migrations (run on open).

Every table lives in one PostgreSQL schema (``nbdurable`` by default, created
when missing), so the store can share a database with other applications.
Version 1, the same layout as the SQLite store::

    nbdurable_schema(version integer PRIMARY KEY, applied_at bigint)
        one row per applied migration; the store's version is max(version)
    nodes(id bytea PRIMARY KEY, parent bytea, message text NOT NULL)
        one message each, content-addressed: id = sha256(parent id + message JSON);
        index on parent (deleting a run keeps nodes that other runs still use)
    runs(id bigint identity PRIMARY KEY, run_id text UNIQUE, created_at, updated_at, last_seq)
        one row per run; id orders runs by creation; last_seq names the latest checkpoint
    checkpoints(run_id, seq, head, version, step_index, status, message_count, usage,
                pending_approvals, agent_path, created_at, finish_reason, extra)
        one row per save, PRIMARY KEY (run_id, seq); seq counts a run's saves
        from 1 with no holes; head is the id of the last message node (NULL for
        an empty history); usage, pending_approvals, agent_path and extra are
        JSON text (kept verbatim, as the codec wrote it); indexes on
        (run_id, step_index, seq) and on head

Version 2 adds the event log::

    events(run_id, position, type, step_index, operation_id, attempt_id, payload, created_at)
        one row per event, PRIMARY KEY (run_id, position); position (bigint) is
        the event's offset: per run, from 1, no holes; payload is JSON text
        (kept verbatim, like the checkpoint columns)
    event_heads(run_id text PRIMARY KEY, last_position bigint NOT NULL)
        one row per run with events: the offset of its last event. An append
        upserts it (adding the number of events) and takes its new offsets
        from the result; the row stays locked until commit, so appenders of
        one run, from any process, queue there and never leave a hole

Version 3 adds the runtime's tables (:mod:`._runs`, the same as
the SQLite store's)::

    rt_runs(run_id text PRIMARY KEY, seq bigint UNIQUE, session_id, state,
            request_id text UNIQUE, fence bigint, record text)
        one row per run the runtime manages: the whole record as JSON text,
        with the columns the scheduler queries; indexes on (session_id, state, seq)
        and (state, seq)
    rt_intents(run_id, tool_call_id, intent text), PRIMARY KEY (run_id, tool_call_id)
        the tool intents written before a tool runs (and completed after)
    rt_journal(run_id, step_index, response text), PRIMARY KEY (run_id, step_index)
        the completed model response of each step

Version 4 adds two columns of ``rt_runs`` for tasks and graphs: ``kind text NOT
NULL DEFAULT 'agent'`` (``agent`` or ``task``; index on (kind, state)) and
``graph_id text`` (the graph a node belongs to; index on (graph_id, seq)).

Version 5 lets workers claim without a lock wider than a row (:mod:`._runs`)::

    rt_runs gains agent_id, agent_version, engine (copied from the record),
        due_at bigint (when a claim may take the run: 0 when pending,
        next_attempt_at in retry_wait, lease_expires_at while running; NULL in
        the other states) and waiting boolean (a waiting reason is recorded);
        partial indexes rt_runs_claim (agent_id, agent_version, kind, seq) and
        rt_runs_unnoted (kind, seq) over the claimable embedded runs
    rt_runs_seq: the sequence submissions take their seq from
    rt_locks(key text PRIMARY KEY)
        one row per session (``session:<id>``), request id and graph, locked
        by the submissions and finishes that must see one order there

An nbdurable that reads version 4 must not write version 5 (its writes would
leave the new columns empty and its claims would take the old, schema-wide
lock), so version 5 says nothing in ``readable_by``.

A migration is a list of SQL statements with ``{s}`` standing for the quoted
schema name. PostgreSQL's DDL is transactional: a migration and its version row
commit together, under an advisory lock, so several processes may open a new
database at once.

A schema whose version is newer than this nbdurable's is refused, unless every
newer version's row says in an optional ``readable_by`` column of
``nbdurable_schema`` that an nbdurable of this schema version still reads it.
See docs/stores.md, "Rolling upgrades".
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any

from ..._errors import CheckpointVersionError, ConfigurationError
from ..._version import __version__
from ._runs_sql import RUNTIME_MIGRATION, RUNTIME_MIGRATION_V4, RUNTIME_MIGRATION_V5

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = ["SCHEMA_VERSION", "advisory_key", "migrate", "quote_ident", "schema_version"]

_V1 = (
    "CREATE TABLE {s}.nodes (id bytea PRIMARY KEY, parent bytea, message text NOT NULL)",
    "CREATE INDEX nodes_parent ON {s}.nodes (parent)",
    """CREATE TABLE {s}.runs (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id text NOT NULL UNIQUE,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL,
        last_seq integer NOT NULL
    )""",
    """CREATE TABLE {s}.checkpoints (
        run_id text NOT NULL,
        seq integer NOT NULL,
        head bytea,
        version integer NOT NULL,
        step_index integer NOT NULL,
        status text NOT NULL,
        message_count integer NOT NULL,
        usage text NOT NULL,
        pending_approvals text NOT NULL,
        agent_path text NOT NULL,
        created_at bigint NOT NULL,
        finish_reason text,
        extra text,
        PRIMARY KEY (run_id, seq)
    )""",
    "CREATE INDEX checkpoints_step ON {s}.checkpoints (run_id, step_index, seq)",
    "CREATE INDEX checkpoints_head ON {s}.checkpoints (head)",
)

_V2 = (
    """CREATE TABLE {s}.events (
        run_id text NOT NULL,
        position bigint NOT NULL,
        type text NOT NULL,
        step_index integer,
        operation_id text,
        attempt_id text,
        payload text NOT NULL,
        created_at bigint NOT NULL,
        PRIMARY KEY (run_id, position)
    )""",
    """CREATE TABLE {s}.event_heads (
        run_id text PRIMARY KEY,
        last_position bigint NOT NULL
    )""",
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    _V1,
    _V2,
    RUNTIME_MIGRATION,
    RUNTIME_MIGRATION_V4,
    RUNTIME_MIGRATION_V5,
)
"""``MIGRATIONS[i]`` takes the schema from version ``i`` to ``i + 1``."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this nbdurable writes."""


def quote_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier.

    Raises:
        ConfigurationError: The name is empty or holds a NUL character.
    """
    if not name or "\x00" in name:
        raise ConfigurationError(f"invalid PostgreSQL schema name {name!r}")
    return '"' + name.replace('"', '""') + '"'


def advisory_key(purpose: str, schema: str) -> int:
    """A signed 64-bit advisory lock key for ``purpose`` on ``schema``."""
    digest = hashlib.sha256(f"nbdurable:{purpose}:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def schema_version(conn: Connection[Any], schema: str) -> int:
    """The version of the schema in ``conn``'s database (0 when it has none yet)."""
    # The catalogs are read with a query (the statement's snapshot), not with
    # to_regclass: a backend's catalog cache can miss a table another session
    # created while this one waited for the migration lock.
    found = conn.execute(_HAS_TABLE, (schema, "nbdurable_schema")).fetchone()
    if not found or not found[0]:
        return 0
    row = conn.execute(
        f"SELECT max(version) FROM {quote_ident(schema)}.nbdurable_schema"
    ).fetchone()
    return int(row[0] or 0) if row else 0


_HAS_TABLE = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %s AND c.relname = %s)"
)
_HAS_SCHEMA = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s)"


_HAS_READABLE_BY = (
    "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = %s "
    "AND table_name = 'nbdurable_schema' AND column_name = 'readable_by')"
)


def readable_newer(conn: Connection[Any], schema: str) -> bool:
    """Whether the versions newer than this nbdurable's all say it still reads them.

    A newer nbdurable whose migration older code can still read records the
    oldest schema version that reads it in ``nbdurable_schema.readable_by``.
    """
    found = conn.execute(_HAS_READABLE_BY, (schema,)).fetchone()
    if not found or not found[0]:
        return False
    rows = conn.execute(
        f"SELECT readable_by FROM {quote_ident(schema)}.nbdurable_schema WHERE version > %s",
        (SCHEMA_VERSION,),
    ).fetchall()
    return all(isinstance(row[0], int) and row[0] <= SCHEMA_VERSION for row in rows)


def _refuse_newer(version: int, where: str, conn: Connection[Any], schema: str) -> None:
    if version > SCHEMA_VERSION and not readable_newer(conn, schema):
        raise CheckpointVersionError(
            version,
            SCHEMA_VERSION,
            message=(
                f"The store {where} has schema version {version}: a newer nbdurable "
                f"migrated it, and this nbdurable ({__version__}) reads schema versions "
                f"up to {SCHEMA_VERSION}; upgrade nbdurable to a release that reads schema "
                f"version {version} to open it (docs/stores.md, 'Rolling upgrades')."
            ),
        )


def migrate(conn: Connection[Any], schema: str, where: str) -> int:
    """Bring ``schema`` up to :data:`SCHEMA_VERSION`; returns the version found on open.

    ``conn`` must be in autocommit mode. An up-to-date schema costs two queries
    and no lock; otherwise the migrations run in one transaction holding a
    transaction-level advisory lock, and the version is read again under it.

    Raises:
        CheckpointVersionError: The schema is newer than this nbdurable reads.
    """
    found = schema_version(conn, schema)
    _refuse_newer(found, where, conn, schema)
    if found >= SCHEMA_VERSION:
        return found
    s = quote_ident(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("migrate", schema),))
        current = schema_version(conn, schema)
        _refuse_newer(current, where, conn, schema)
        if current == 0:
            exists = conn.execute(_HAS_SCHEMA, (schema,)).fetchone()
            if not exists or not exists[0]:
                conn.execute(f"CREATE SCHEMA {s}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {s}.nbdurable_schema "
                "(version integer PRIMARY KEY, applied_at bigint NOT NULL)"
            )
        for target in range(current + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[target - 1]:
                conn.execute(statement.format(s=s))
            conn.execute(
                f"INSERT INTO {s}.nbdurable_schema (version, applied_at) VALUES (%s, %s)",
                (target, int(time.time() * 1000)),
            )
    return found
