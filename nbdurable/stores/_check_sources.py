"""Read-only views of the SQLite and PostgreSQL stores' tables, for :mod:`.check`.

SQLite is opened read-only (``mode=ro``) with text read as bytes, so one row
that is not UTF-8 is reported instead of stopping the scan; checkpoints and
events are read by full scans (``NOT INDEXED``), so a damaged index does not
hide rows. Packed values (:mod:`.packing`) are unpacked to the UTF-8 text
they stand for; one that does not unpack reaches the check as the error saying
why. PostgreSQL is read in one read-only, repeatable-read transaction.
"""

from __future__ import annotations

import functools
import itertools
import json
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .._errors import ConfigurationError, StoreCorruptionError
from ._check import CheckReport, check_sql, iter_batches
from ._packing import unpack_attempt, unpack_json, unpack_operation, unpack_type
from ._rows import COLUMNS
from .sqlite._events import LAST_EVENT, batch_events
from .sqlite._schema import SCHEMA_VERSION, schema_damage, versions_sound

__all__ = ["check_postgres", "check_sqlite"]

_CHECKPOINTS = f"SELECT run_id, seq, head, {', '.join(COLUMNS)} FROM checkpoints"
_EVENTS = (
    "SELECT run_id, position, type, step_index, operation_id, attempt_id, payload, created_at "
    "FROM events"
)
# SQLite also reads each packable column's type: a text-as-bytes connection
# cannot otherwise tell packed BLOBs from text.
_SQLITE_CHECKPOINTS = _CHECKPOINTS.replace(
    " FROM checkpoints", ", typeof(usage), typeof(extra) FROM checkpoints"
)
_SQLITE_EVENTS = _EVENTS.replace(
    " FROM events",
    ", typeof(type), typeof(operation_id), typeof(attempt_id), typeof(payload) FROM events",
)
_SQLITE_BATCHES = (
    "SELECT run_id, position, first, events, typeof(events) FROM event_batches NOT INDEXED"
)
_LAST_LEGACY_EVENT = "SELECT max(position) FROM events WHERE run_id = ?"
_USAGE = 3 + COLUMNS.index("usage")
_EXTRA = 3 + COLUMNS.index("extra")
_RUNTIME = {
    "rt_runs": "SELECT run_id, NULL, record FROM rt_runs",
    "rt_intents": "SELECT run_id, tool_call_id, intent FROM rt_intents",
    "rt_journal": "SELECT run_id, step_index, response FROM rt_journal",
}
_MAX_PROBLEMS = 100
"""Integrity-check lines reported at most (SQLite stops there too)."""
_INDEX_ONLY = ("missing from index", "wrong # of entries in index", "index ")


def check_sqlite(url: str) -> CheckReport:
    """Check a SQLite store file without writing to it.

    Raises:
        ConfigurationError: There is no file at the URL's path.
    """
    from . import local_path

    path = local_path(url, url.partition("://")[2])
    if path == ":memory:" or not Path(path).is_file():
        raise ConfigurationError(f"no SQLite store file at {path!r}")
    report = CheckReport(url)
    uri = f"file:{quote(str(Path(path).resolve()))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    conn.text_factory = bytes
    try:
        source = _SqliteSource(conn)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            report.add(
                f"it is not a readable SQLite database ({exc}): its header or first page "
                "is damaged, or it is another kind of file"
            )
            return report
        conn.execute("BEGIN")  # one snapshot for the whole check
        check_sql(source, report)
        if _version(conn) >= 7:
            from ._check_crc import check_checksums

            check_checksums(conn, report)
        if (
            report.damage
            and all(
                any(t in d.what for t in _INDEX_ONLY) for d in report.damage if d.run_id is None
            )
            and not report.affected_runs
        ):
            report.notes.append(
                "only indexes are damaged: `sqlite3 FILE 'REINDEX;'` rebuilds them from the "
                "tables (copy the file first)"
            )
    finally:
        conn.close()
    return report


def _version(conn: sqlite3.Connection) -> int:
    """The file's schema version, or 0 when it cannot be read (reported already)."""
    try:
        row = conn.execute("SELECT max(version) FROM nbdurable_schema").fetchone()
    except sqlite3.DatabaseError:
        return 0
    return row[0] if type(row[0]) is int else 0


def _unpacked(value: Any, kind: bytes) -> Any:
    """A packed BLOB as the UTF-8 JSON it stands for (or the error); anything else as read."""
    if kind != b"blob":
        return value
    try:
        return unpack_json(bytes(value)).encode()
    except StoreCorruptionError as exc:
        return exc


def _checkpoint(row: tuple[Any, ...]) -> tuple[Any, ...]:
    values = list(row[:-2])
    values[_USAGE] = _unpacked(values[_USAGE], row[-2])
    values[_EXTRA] = _unpacked(values[_EXTRA], row[-1])
    return tuple(values)


def _event(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """An event row with its packed columns unpacked (a value that does not: its error)."""
    run_id, position, type_, step, operation, attempt, payload, created = row[:8]
    kinds = row[8:]
    try:
        if kinds[0] == b"blob":
            type_ = unpack_type(bytes(type_)).encode()
        if kinds[1] == b"blob":
            name = bytes(run_id).decode("utf-8", "replace")
            operation = str(unpack_operation(bytes(operation), name, step)).encode()
        if kinds[2] == b"blob":
            attempt = str(unpack_attempt(bytes(attempt))).encode()
    except StoreCorruptionError as exc:
        payload = exc
    else:
        payload = _unpacked(payload, kinds[3])
    return (run_id, position, type_, step, operation, attempt, payload, created)


def _batch_rows(row: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The events of an ``event_batches`` row as event rows (:func:`_event`'s shape).

    A batch that does not decode stands for every offset it claims, each with the
    error as its payload (the check reports them as events that do not decode).
    """
    run_id, position, first, value, kind = row
    name = bytes(run_id).decode("utf-8", "replace")
    try:
        if kind == b"blob":
            value = unpack_json(bytes(value))
        elif isinstance(value, bytes):
            value = value.decode()
        events = batch_events(name, int(position), int(first), value)
    except (ValueError, TypeError, StoreCorruptionError) as exc:
        error = exc if isinstance(exc, StoreCorruptionError) else StoreCorruptionError(str(exc))
        ends = (first, position)
        numbers = all(type(end) is int for end in ends) and first <= position
        span: Iterable[Any] = range(first, position + 1) if numbers else [position]
        return [(run_id, p, None, None, None, None, error, None) for p in span]
    return [
        (
            run_id,
            e.offset,
            e.type.encode(),
            e.step_index,
            None if e.operation_id is None else e.operation_id.encode(),
            None if e.attempt_id is None else e.attempt_id.encode(),
            json.dumps(e.payload, ensure_ascii=False).encode(),
            e.created_at,
        )
        for e in events
    ]


class _SqliteSource:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def file_problems(self) -> list[str]:
        rows = self.conn.execute(f"PRAGMA integrity_check({_MAX_PROBLEMS})").fetchall()
        lines = [bytes(r[0]).decode("utf-8", "replace") for r in rows]
        problems = [] if lines == ["ok"] else lines
        # The schema table's text is not covered by the integrity check.
        for row in self.conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"):
            try:
                [value.decode("utf-8") for value in row if isinstance(value, bytes)]
            except UnicodeDecodeError:
                name = bytes(row[1] or b"").decode("utf-8", "replace")
                problems.append(f"the schema entry {name!r} is not valid UTF-8")
        return problems

    def schema_version(self) -> int:
        has = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'nbdurable_schema'"
        ).fetchone()
        if has is None:
            return 0
        row = self.conn.execute("SELECT max(version) FROM nbdurable_schema").fetchone()
        version = int(row[0] or 0)
        if version > SCHEMA_VERSION and not versions_sound(self.conn):
            raise ValueError(f"its schema version table is damaged (it says {version})")
        damage = schema_damage(self.conn, min(version, SCHEMA_VERSION))
        if damage is not None:
            raise ValueError(f"its schema is damaged: it lacks {damage}")
        return version

    def runs(self) -> list[tuple[Any, Any]]:
        return self.conn.execute("SELECT run_id, last_seq FROM runs NOT INDEXED").fetchall()

    def checkpoints(self, run_id: str | None = None) -> Iterable[tuple[Any, ...]]:
        if run_id is None:
            found = self.conn.execute(f"{_SQLITE_CHECKPOINTS} NOT INDEXED").fetchall()
        else:
            query = f"{_SQLITE_CHECKPOINTS} WHERE run_id = ?"
            found = self.conn.execute(query, (run_id,)).fetchall()
        return [_checkpoint(row) for row in found]

    def node(self, node: bytes) -> tuple[bytes | None, Any] | None:
        row = self.conn.execute(
            "SELECT parent, message, typeof(message) FROM nodes WHERE id = ?", (node,)
        )
        found = row.fetchone()
        return None if found is None else (found[0], _unpacked(found[1], found[2]))

    @functools.cached_property
    def batched(self) -> bool:
        """Whether the file has the event batches of schema version 6 (looked up once)."""
        row = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'event_batches'"
        )
        return row.fetchone() is not None

    def events(self, run_id: str | None = None) -> Iterable[tuple[Any, ...]]:
        # Rows of version 5 and before, then the batches (one per commit) as events.
        # `events` is WITHOUT ROWID: the table is its primary key, so its order
        # costs no sort; batches are scanned and sorted (their index may be damaged).
        if run_id is None:
            rows = iter_batches(self.conn.execute(f"{_SQLITE_EVENTS} ORDER BY run_id, position"))
            found = (_event(row) for row in rows)
            if not self.batched:
                return found
            query = f"{_SQLITE_BATCHES} ORDER BY run_id, position"
            batches = iter_batches(self.conn.execute(query))
            return itertools.chain(found, (e for row in batches for e in _batch_rows(row)))
        query = f"{_SQLITE_EVENTS} WHERE run_id = ? ORDER BY position"
        events = [_event(row) for row in self.conn.execute(query, (run_id,)).fetchall()]
        if self.batched:
            query = f"{_SQLITE_BATCHES} WHERE run_id = ? ORDER BY position"
            for row in self.conn.execute(query, (run_id,)).fetchall():
                events.extend(_batch_rows(row))
        return events

    def last_event(self, run_id: str) -> int:
        query = LAST_EVENT if self.batched else _LAST_LEGACY_EVENT
        return int(self.conn.execute(query, (run_id,)).fetchone()[0] or 0)

    def runtime_rows(self, table: str) -> Iterable[tuple[Any, ...]]:
        return self.conn.execute(_RUNTIME[table]).fetchall()


def check_postgres(url: str) -> CheckReport:
    """Check a PostgreSQL store (its schema, from ``?schema=``, default ``nbdurable``).

    Raises:
        ConfigurationError: The ``postgres`` extra is not installed.
    """
    from .postgres._connect import driver, split_schema
    from .postgres._schema import quote_ident

    psycopg, _ = driver()
    conninfo, schema = split_schema(url)
    schema = schema or "nbdurable"
    report = CheckReport(_without_password(url))
    with psycopg.connect(conninfo, autocommit=False) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        source = _PostgresSource(conn, schema, quote_ident(schema))
        if not source.has_amcheck():
            report.notes.append(
                "the amcheck extension is not installed: PostgreSQL's pages and indexes "
                "were not checked (CREATE EXTENSION amcheck; data checksums help too)"
            )
        check_sql(source, report)
        conn.rollback()
    return report


class _PostgresSource:
    def __init__(self, conn: Any, schema: str, quoted: str) -> None:
        self.conn = conn
        self.schema = schema
        self.s = quoted

    def has_amcheck(self) -> bool:
        row = self.conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'amcheck'").fetchone()
        return row is not None

    def file_problems(self) -> list[str]:
        if not self.has_amcheck():
            return []
        indexes = self.conn.execute(
            "SELECT c.oid, c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_am a ON a.oid = c.relam "
            "WHERE n.nspname = %s AND a.amname = 'btree'",
            (self.schema,),
        ).fetchall()
        problems = []
        for oid, name in indexes:
            try:
                with self.conn.transaction():  # a savepoint: one failure does not end the check
                    self.conn.execute("SELECT bt_index_check(%s, true)", (oid,))
            except Exception as exc:
                problems.append(f"index {name}: {' '.join(str(exc).split())}")
        return problems

    def schema_version(self) -> int:
        from .postgres._schema import schema_version

        return schema_version(self.conn, self.schema)

    def runs(self) -> list[tuple[Any, Any]]:
        return list(self.conn.execute(f"SELECT run_id, last_seq FROM {self.s}.runs").fetchall())

    def checkpoints(self, run_id: str | None = None) -> Iterable[tuple[Any, ...]]:
        query = _CHECKPOINTS.replace("FROM checkpoints", f"FROM {self.s}.checkpoints")
        if run_id is None:
            return self._stream(query)
        rows: list[tuple[Any, ...]] = self.conn.execute(
            f"{query} WHERE run_id = %s", (run_id,)
        ).fetchall()
        return rows

    def node(self, node: bytes) -> tuple[bytes | None, Any] | None:
        found = self.conn.execute(
            f"SELECT parent, message FROM {self.s}.nodes WHERE id = %s", (node,)
        ).fetchone()
        return None if found is None else (found[0], found[1])

    def events(self, run_id: str | None = None) -> Iterable[tuple[Any, ...]]:
        query = _EVENTS.replace("FROM events", f"FROM {self.s}.events")
        if run_id is None:
            return self._stream(f"{query} ORDER BY run_id, position")
        found = self.conn.execute(f"{query} WHERE run_id = %s ORDER BY position", (run_id,))
        rows: list[tuple[Any, ...]] = found.fetchall()
        return rows

    def last_event(self, run_id: str) -> int:
        row = self.conn.execute(
            f"SELECT max(position) FROM {self.s}.events WHERE run_id = %s", (run_id,)
        ).fetchone()
        return int(row[0] or 0)

    def runtime_rows(self, table: str) -> Iterable[tuple[Any, ...]]:
        return self._stream(_RUNTIME[table].replace(f"FROM {table}", f"FROM {self.s}.{table}"))

    def _stream(self, query: str) -> Iterator[tuple[Any, ...]]:
        with self.conn.cursor(name=f"nbdurable_check_{id(query)}") as cursor:
            cursor.execute(query)
            yield from iter_batches(cursor)


def _without_password(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
