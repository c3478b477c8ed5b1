"""The SQLite store's schema and its versioned migrations (run on open).

Version 1::

    nbdurable_schema(version INTEGER PRIMARY KEY, applied_at INTEGER)
        one row per applied migration; the store's version is max(version)
    nodes(id BLOB PRIMARY KEY, parent BLOB, message TEXT NOT NULL)
        one message each, content-addressed: id = sha256(parent id + message JSON);
        index on parent (deleting a run keeps nodes that other runs still use)
    runs(id INTEGER PRIMARY KEY, run_id TEXT UNIQUE, created_at, updated_at, last_seq)
        one row per run; id orders runs by creation; last_seq names the latest checkpoint
    checkpoints(run_id, seq, head, version, step_index, status, message_count, usage,
                pending_approvals, agent_path, created_at, finish_reason, extra)
        one row per save, PRIMARY KEY (run_id, seq); seq counts a run's saves
        from 1 with no holes; head is the id of the last message node (NULL for
        an empty history); usage, pending_approvals, agent_path and extra are
        JSON text; indexes on (run_id, step_index, seq) and on head

Version 2 adds the event log::

    events(run_id, position, type, step_index, operation_id, attempt_id, payload, created_at)
        one row per event, PRIMARY KEY (run_id, position), WITHOUT ROWID; position is
        the event's offset: per run, from 1, no holes (assigned in the writing
        transaction); payload is JSON text

Version 3 adds the runtime's tables (see :mod:`._runs`)::

    rt_runs(run_id PK, seq UNIQUE, session_id, state, request_id UNIQUE, fence, record)
        one row per runtime run; record is the RuntimeRun JSON
    rt_intents(run_id, tool_call_id, intent)   tool intents, PK (run_id, tool_call_id)
    rt_journal(run_id, step_index, response)   completed model responses

Version 4 adds two columns of rt_runs for tasks and graphs::

    kind TEXT NOT NULL DEFAULT 'agent'   'agent' or 'task'; index (kind, state)
    graph_id TEXT                        the graph a node belongs to; index (graph_id, seq)

Version 5 packs values (see :mod:`._codec`); it adds no column. Event
payloads, message nodes and a checkpoint's ``usage`` and ``extra`` may be a BLOB
(a dictionary byte, then deflated JSON) instead of JSON text; an event's
``type`` a one-byte code, its ``attempt_id`` 16 bytes, its ``operation_id`` an
empty BLOB for the loop's usual id. Rows written before stay as they are (this
version reads both forms), and the version row has no ``readable_by``: an
nbdurable of version 4 or earlier cannot read packed values, so it refuses the
file by name (``CheckpointVersionError``) instead of misreading it.

Version 6 writes the event log one row per commit (see :mod:`._events`)::

    event_batches(run_id, position, first, events)
        one row per commit that appends events, UNIQUE (run_id, position) (a
        rowid table); position is the offset of the commit's last event, first
        of its first; events is the commit's events as one packed JSON array.
        Rows of ``events`` written before stay there and are read as they are;
        an nbdurable of version 5 or earlier would not see the batches, so it
        refuses the file (no ``readable_by``).

Version 7 adds a checksum to every row but message nodes (see :mod:`._crc`)::

    crc INTEGER   in runs, checkpoints, event_batches, rt_runs, rt_intents, rt_journal
        the CRC-32 of the table's name and the row's values, keys included;
        NULL in rows written before (read as they are). An nbdurable of version
        6 or earlier would write rows without it and leave a row it updates
        with a stale one, so it refuses the file (no ``readable_by``).

A migration is a function of a ``sqlite_utils.Database``; it must be idempotent
(``if_not_exists``), because a crash between its statements and the version row
makes the next open run it again.

A store whose version is newer than this nbdurable's is refused, unless every
newer version's row says in an optional ``readable_by`` column of
``nbdurable_schema`` that an nbdurable of this schema version still reads it (a
migration that only adds what older code ignores: a nullable column, a table,
an index). See docs/stores.md, "Rolling upgrades".
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..._errors import CheckpointVersionError, StoreCorruptionError
from ..._version import __version__

if TYPE_CHECKING:
    from sqlite_utils import Database

__all__ = [
    "CHECKSUMMED",
    "legacy_rows",
    "SCHEMA_VERSION",
    "migrate",
    "schema_damage",
    "schema_version",
    "verify_schema",
    "versions_sound",
]


_V1_TABLES: dict[str, dict[str, type]] = {
    "nodes": {"id": bytes, "parent": bytes, "message": str},
    "runs": {"id": int, "run_id": str, "created_at": int, "updated_at": int, "last_seq": int},
    "checkpoints": {
        "run_id": str,
        "seq": int,
        "head": bytes,
        "version": int,
        "step_index": int,
        "status": str,
        "message_count": int,
        "usage": str,
        "pending_approvals": str,
        "agent_path": str,
        "created_at": int,
        "finish_reason": str,
        "extra": str,
    },
}
"""Version 1's tables and columns: :func:`_v1` creates them, :func:`schema_damage` checks them."""


def _v1(db: Database) -> None:
    db.table("nodes").create(_V1_TABLES["nodes"], pk="id", not_null={"message"}, if_not_exists=True)
    db.table("nodes").create_index(["parent"], index_name="nodes_parent", if_not_exists=True)
    db.table("runs").create(
        _V1_TABLES["runs"],
        pk="id",
        not_null={"run_id", "created_at", "updated_at", "last_seq"},
        if_not_exists=True,
    )
    db.table("runs").create_index(
        ["run_id"], index_name="runs_run_id", unique=True, if_not_exists=True
    )
    checkpoints = _V1_TABLES["checkpoints"]
    db.table("checkpoints").create(
        checkpoints,
        pk=("run_id", "seq"),
        not_null=set(checkpoints) - {"head", "finish_reason", "extra"},
        if_not_exists=True,
    )
    db.table("checkpoints").create_index(
        ["run_id", "step_index", "seq"], index_name="checkpoints_step", if_not_exists=True
    )
    db.table("checkpoints").create_index(
        ["head"], index_name="checkpoints_head", if_not_exists=True
    )


def _v2(db: Database) -> None:
    db.execute(
        """
        CREATE TABLE IF NOT EXISTS events (
            run_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            type TEXT NOT NULL,
            step_index INTEGER,
            operation_id TEXT,
            attempt_id TEXT,
            payload TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            PRIMARY KEY (run_id, position)
        ) WITHOUT ROWID
        """
    )


def _v3(db: Database) -> None:
    from ._runs import migrate_runtime

    migrate_runtime(db)


def _v4(db: Database) -> None:
    from ._runs import migrate_runtime_v4

    migrate_runtime_v4(db)


def _v5(db: Database) -> None:
    # Packed values need no DDL: the version row alone keeps older releases out.
    del db


def _v6(db: Database) -> None:
    # Rows of version 5 and before stay in `events` and are read from there. A
    # rowid table, unlike `events`: a batch is often larger than the ~490 bytes a
    # WITHOUT ROWID row keeps on its page, and each larger row would spill into an
    # overflow page of its own (a 600-byte batch then takes 2 KB).
    db.execute(
        """
        CREATE TABLE IF NOT EXISTS event_batches (
            run_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            first INTEGER NOT NULL,
            events NOT NULL,
            UNIQUE (run_id, position)
        )
        """
    )


CHECKSUMMED = ("runs", "checkpoints", "event_batches", "rt_runs", "rt_intents", "rt_journal")
"""The tables whose rows carry a checksum from version 7 on (see :mod:`._crc`)."""


def _v7(db: Database) -> None:
    # A nullable column: rows written before keep NULL and are read as they are.
    for table in CHECKSUMMED:
        columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})").fetchall()}
        if "crc" not in columns:
            db.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")
    # Whether rows without a checksum may be there: only in a file that had rows
    # before this migration. A file created at version 7 never has one.
    db.execute("CREATE TABLE IF NOT EXISTS nbdurable_checksums (legacy_rows INTEGER NOT NULL)")
    from ._heads import CREATE_HEADS

    db.execute(CREATE_HEADS)
    if db.execute("SELECT count(*) FROM nbdurable_checksums").fetchone()[0] == 0:
        older = any(
            db.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]
            for table in CHECKSUMMED
        )
        db.execute("INSERT INTO nbdurable_checksums (legacy_rows) VALUES (?)", (int(older),))


def legacy_rows(conn: sqlite3.Connection, path: str) -> bool:
    """Whether the file may hold rows without a checksum (it had rows before version 7).

    Raises:
        StoreCorruptionError: The table that says so is damaged.
    """
    rows = conn.execute("SELECT legacy_rows FROM nbdurable_checksums").fetchall()
    if len(rows) != 1 or rows[0][0] not in (0, 1):
        raise StoreCorruptionError(
            f"the SQLite store {path} is damaged: its table nbdurable_checksums holds "
            f"{rows[:3]!r}, not one row of 0 or 1. Run `nbdurable store check "
            f"sqlite:///{path}` and restore the file from a backup (docs/stores.md, "
            "'Broken store files').",
            path=path,
        )
    return bool(rows[0][0])


MIGRATIONS: tuple[Callable[[Database], None], ...] = (_v1, _v2, _v3, _v4, _v5, _v6, _v7)
"""``MIGRATIONS[i]`` takes the schema from version ``i`` to ``i + 1``."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this nbdurable writes."""


def schema_version(conn: sqlite3.Connection) -> int:
    """The version of the schema in ``conn``'s database (0 for an empty database)."""
    try:
        row = conn.execute("SELECT max(version) FROM nbdurable_schema").fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return 0
        raise
    return int(row[0] or 0)


def readable_newer(conn: sqlite3.Connection) -> bool:
    """Whether the versions newer than this nbdurable's all say it still reads them.

    A newer nbdurable whose migration older code can still read records the
    oldest schema version that reads it in ``nbdurable_schema.readable_by``.
    """
    columns = {row[1] for row in conn.execute("PRAGMA table_info(nbdurable_schema)")}
    if "readable_by" not in columns:
        return False
    rows = conn.execute(
        "SELECT readable_by FROM nbdurable_schema WHERE version > ?", (SCHEMA_VERSION,)
    ).fetchall()
    return all(
        isinstance(row[0], int) and not isinstance(row[0], bool) and row[0] <= SCHEMA_VERSION
        for row in rows
    )


def _refuse_newer(version: int, path: str, conn: sqlite3.Connection | None = None) -> None:
    if version > SCHEMA_VERSION and conn is not None and not versions_sound(conn):
        raise StoreCorruptionError(
            f"the SQLite store {path} is damaged: its schema version table says {version} "
            f"but lacks a row of versions 1-{SCHEMA_VERSION}. Run `nbdurable store check "
            f"sqlite:///{path}` and restore the file from a backup (docs/stores.md, "
            "'Broken store files').",
            path=path,
        )
    if version > SCHEMA_VERSION and (conn is None or not readable_newer(conn)):
        raise CheckpointVersionError(
            version,
            SCHEMA_VERSION,
            message=(
                f"The store {path!r} has schema version {version}: a newer nbdurable "
                f"migrated it, and this nbdurable ({__version__}) reads schema versions "
                f"up to {SCHEMA_VERSION}; upgrade nbdurable to a release that reads schema "
                f"version {version} to open it (docs/stores.md, 'Rolling upgrades')."
            ),
        )


def versions_sound(conn: sqlite3.Connection) -> bool:
    """Whether the version table holds a row for each version up to this nbdurable's.

    Every store a newer nbdurable wrote went through versions 1..SCHEMA_VERSION,
    one row each: a larger number with one of those missing is a damaged row,
    not a newer nbdurable.
    """
    found = {row[0] for row in conn.execute("SELECT version FROM nbdurable_schema")}
    return set(range(1, SCHEMA_VERSION + 1)) <= found


def migrate(conn: sqlite3.Connection, path: str) -> int:
    """Bring the schema up to :data:`SCHEMA_VERSION`; returns the version found on open.

    Safe when several processes open a new file at once: migrations run under
    the write lock and re-read the version after taking it.

    Raises:
        CheckpointVersionError: The schema is newer than this nbdurable reads.
    """
    found = schema_version(conn)
    _refuse_newer(found, path, conn)
    if found > 0:
        verify_schema(conn, path, min(found, SCHEMA_VERSION))
    if found >= SCHEMA_VERSION:
        return found
    # Imported only here: sqlite-utils imports numpy and pandas when they are
    # installed, which costs every process that merely opens an up-to-date store.
    from sqlite_utils import Database

    db = Database(conn, recursive_triggers=False, execute_plugins=False)
    conn.execute("BEGIN IMMEDIATE")
    try:
        current = schema_version(conn)
        _refuse_newer(current, path, conn)
        if current == 0:
            db.table("nbdurable_schema").create(
                {"version": int, "applied_at": int}, pk="version", if_not_exists=True
            )
        for target in range(current + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[target - 1](db)
            conn.execute(
                "INSERT OR IGNORE INTO nbdurable_schema (version, applied_at) VALUES (?, ?)",
                (target, int(time.time() * 1000)),
            )
        if conn.in_transaction:
            conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return found


# The columns the store reads, per table, by the schema version that adds them.
_COLUMNS: dict[int, dict[str, set[str]]] = {
    1: {
        "nbdurable_schema": {"version", "applied_at"},
        **{table: set(columns) for table, columns in _V1_TABLES.items()},
    },
    2: {
        "events": {
            "run_id",
            "position",
            "type",
            "step_index",
            "operation_id",
            "attempt_id",
            "payload",
            "created_at",
        },
    },
    3: {
        "rt_runs": {"run_id", "seq", "session_id", "state", "request_id", "fence", "record"},
        "rt_intents": {"run_id", "tool_call_id", "intent"},
        "rt_journal": {"run_id", "step_index", "response"},
    },
    4: {"rt_runs": {"kind", "graph_id"}},
    6: {"event_batches": {"run_id", "position", "first", "events"}},
    7: {
        "nbdurable_checksums": {"legacy_rows"},
        "run_heads": {"run_id", "events", "intents", "journal", "record", "crc"},
        **{table: {"crc"} for table in CHECKSUMMED},
    },
}


def schema_damage(conn: sqlite3.Connection, version: int = SCHEMA_VERSION) -> str | None:
    """What the schema of a store at ``version`` lacks, or None when it has every column."""
    missing: list[str] = []
    for added in range(1, version + 1):
        for table, wanted in _COLUMNS.get(added, {}).items():
            rows = conn.execute(f"PRAGMA table_info({table})").fetchall()
            # (a checking connection reads text as bytes)
            found = {r[1].decode() if isinstance(r[1], bytes) else r[1] for r in rows}
            if not found:
                missing.append(f"table {table}")
            elif not wanted <= found:
                missing.append(f"{table}({', '.join(sorted(wanted - found))})")
    return ", ".join(missing) if missing else None


def verify_schema(conn: sqlite3.Connection, path: str, version: int = SCHEMA_VERSION) -> None:
    """Check that every table holds the columns the store reads (a few catalog reads).

    A damaged first page can leave SQLite a schema that parses but is not ours:
    queries would then fail with "no such column", or read one column as another.

    Raises:
        StoreCorruptionError: A table or a column is missing.
    """
    damage = schema_damage(conn, version)
    if damage is not None:
        raise StoreCorruptionError(
            f"the SQLite store {path} is damaged: its schema lacks {damage}. "
            f"Run `nbdurable store check sqlite:///{path}` and restore the file from a "
            "backup (docs/stores.md, 'Broken store files').",
            path=path,
        )
