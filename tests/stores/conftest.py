"""The store registry the conformance suite runs over.

Each backend is one entry of ``BACKENDS``: how to make a fresh, empty store URL,
plus the hooks its declared capabilities need (measuring what a save writes,
damaging stored data, faking a newer schema). A new backend joins every
conformance test by adding one entry.

PostgreSQL runs against one throwaway server per test session
(``tests/support/pgserver.py``), with a fresh database per test (the ``pg_server`` and
``pg_database`` fixtures of ``tests/conftest.py``, which the runtime tests share). When PostgreSQL is not
installed its tests fail with a message saying how to get it (``.ci/run``
installs it); ``NBDURABLE_SKIP_POSTGRES=1`` skips them on purpose.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from support.pgserver import PgServer  # noqa: F401  (re-exported: test_postgres*.py import it from here)
from support.reseal import reseal

import nbdurable as nd
from nbdurable.stores.jsonl._format import FORMAT_FILE, run_file_name

Damage = Literal["message", "chain", "metadata", "future_version"]
"""How ``corrupt`` damages the checkpoint of (run, step): a message's stored bytes,
a message it needs removed, its own metadata, or its checkpoint version set to 2."""


@dataclass(frozen=True)
class Footprint:
    """What a store holds.

    Attributes:
        bytes: Bytes of stored data: row and index payloads for a database
            (exact per save, unlike a file that grows by whole pages), file
            bytes for JSONL.
        rows: Rows (lines for JSONL).
        disk: Bytes on disk.
    """

    bytes: int
    rows: int
    disk: int

    def __sub__(self, other: Footprint) -> Footprint:
        return Footprint(self.bytes - other.bytes, self.rows - other.rows, self.disk - other.disk)


@dataclass(frozen=True)
class Backend:
    """One store backend under test.

    Attributes:
        name: Test id.
        make_url: A URL of a fresh, empty store (may use fixtures via ``request``).
        footprint: Measures the store at a URL (required for ``INCREMENTAL``).
        corrupt: Damages the data of (url, run_id, step_index) (required for ``PERSISTENT``).
        set_schema_version: Marks the store at a URL as written by schema version N
            (required for ``VERSIONED_SCHEMA``).
    """

    name: str
    make_url: Callable[[pytest.FixtureRequest, Path], str]
    footprint: Callable[[str], Footprint] | None = None
    corrupt: Callable[[str, str, int, Damage], None] | None = None
    set_schema_version: Callable[[str, int], None] | None = None


# -- SQLite hooks ---------------------------------------------------------------------------


def _sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


def _sqlite_footprint(url: str) -> Footprint:
    path = _sqlite_path(url)
    conn = sqlite3.connect(path)
    try:
        # Move the WAL into the main file so the file size counts what is stored.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = sum(
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("nodes", "checkpoints", "runs")
        )
        disk = Path(path).stat().st_size
        try:
            payload = conn.execute("SELECT sum(payload) FROM dbstat").fetchone()[0]
        except sqlite3.OperationalError:  # SQLite built without the dbstat table
            payload = disk
    finally:
        conn.close()
    return Footprint(payload, rows, disk)


def _sqlite_corrupt(url: str, run_id: str, step_index: int, damage: Damage) -> None:
    conn = sqlite3.connect(_sqlite_path(url), isolation_level=None)
    try:
        seq, head = conn.execute(
            "SELECT seq, head FROM checkpoints WHERE run_id = ? AND step_index = ? "
            "ORDER BY seq DESC LIMIT 1",
            (run_id, step_index),
        ).fetchone()
        if damage == "message":
            conn.execute('UPDATE nodes SET message = \'{"role": "robot"\' WHERE id = ?', (head,))
        elif damage == "chain":
            parent = conn.execute("SELECT parent FROM nodes WHERE id = ?", (head,)).fetchone()[0]
            conn.execute("DELETE FROM nodes WHERE id = ?", (parent,))
        elif damage == "metadata":
            conn.execute(
                "UPDATE checkpoints SET usage = 'not json' WHERE run_id = ? AND seq = ?",
                (run_id, seq),
            )
        else:
            conn.execute(
                "UPDATE checkpoints SET version = 2 WHERE run_id = ? AND seq = ?", (run_id, seq)
            )
    finally:
        conn.close()
    if damage == "future_version":
        reseal(_sqlite_path(url))  # a newer release checksums the rows it writes


def _sqlite_set_schema_version(url: str, version: int) -> None:
    conn = sqlite3.connect(_sqlite_path(url), isolation_level=None)
    try:
        conn.execute("INSERT INTO nbdurable_schema (version, applied_at) VALUES (?, 0)", (version,))
    finally:
        conn.close()


# -- JSONL hooks ----------------------------------------------------------------------------


def _jsonl_dir(url: str) -> Path:
    return Path(url.removeprefix("jsonl:///"))


def _jsonl_footprint(url: str) -> Footprint:
    files = list(_jsonl_dir(url).glob("*.jsonl"))
    size = sum(f.stat().st_size for f in files)
    return Footprint(size, sum(f.read_bytes().count(b"\n") for f in files), size)


def _jsonl_corrupt(url: str, run_id: str, step_index: int, damage: Damage) -> None:
    path = _jsonl_dir(url) / run_file_name(run_id)
    lines = path.read_bytes().split(b"\n")
    index = max(
        i for i, raw in enumerate(lines) if raw and json.loads(raw)["step_index"] == step_index
    )
    line = json.loads(lines[index])
    if damage == "message":
        line["messages"][-1]["role"] = "robot"
    elif damage == "chain":
        line["messages"] = line["messages"][:-1]
    elif damage == "metadata":
        line["usage"] = "not usage"
    else:
        line["version"] = 2
    lines[index] = json.dumps(line).encode()
    path.write_bytes(b"\n".join(lines))


def _jsonl_set_schema_version(url: str, version: int) -> None:
    marker = _jsonl_dir(url) / FORMAT_FILE
    marker.write_text(json.dumps({"format": "nbdurable-jsonl", "version": version}))


# -- PostgreSQL hooks -----------------------------------------------------------------------

PG_SCHEMA = "nbdurable"
PG_TABLES = ("nodes", "checkpoints", "runs")


def _pg_connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _pg_footprint(url: str) -> Footprint:
    # bytes: pg_column_size of every live row (the tuple as stored, header
    # included): exact per save, where relation sizes grow by 8 KB pages.
    # An updated row (the run's) counts once, as its latest version.
    rows = size = 0
    with _pg_connect(url) as conn:
        for table in PG_TABLES:
            count, total = conn.execute(
                f"SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM {PG_SCHEMA}.{table} t"
            ).fetchone()
            rows += count
            size += total
        (disk,) = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r'",
            (PG_SCHEMA,),
        ).fetchone()
    return Footprint(int(size), int(rows), int(disk))


def _pg_corrupt(url: str, run_id: str, step_index: int, damage: Damage) -> None:
    s = PG_SCHEMA
    with _pg_connect(url) as conn:
        seq, head = conn.execute(
            f"SELECT seq, head FROM {s}.checkpoints WHERE run_id = %s AND step_index = %s "
            "ORDER BY seq DESC LIMIT 1",
            (run_id, step_index),
        ).fetchone()
        if damage == "message":
            conn.execute(
                f'UPDATE {s}.nodes SET message = \'{{"role": "robot"\' WHERE id = %s', (head,)
            )
        elif damage == "chain":
            (parent,) = conn.execute(
                f"SELECT parent FROM {s}.nodes WHERE id = %s", (head,)
            ).fetchone()
            conn.execute(f"DELETE FROM {s}.nodes WHERE id = %s", (parent,))
        elif damage == "metadata":
            conn.execute(
                f"UPDATE {s}.checkpoints SET usage = 'not json' WHERE run_id = %s AND seq = %s",
                (run_id, seq),
            )
        else:
            conn.execute(
                f"UPDATE {s}.checkpoints SET version = 2 WHERE run_id = %s AND seq = %s",
                (run_id, seq),
            )


def _pg_set_schema_version(url: str, version: int) -> None:
    with _pg_connect(url) as conn:
        conn.execute(
            f"INSERT INTO {PG_SCHEMA}.nbdurable_schema (version, applied_at) VALUES (%s, 0)",
            (version,),
        )


BACKENDS: dict[str, Backend] = {
    "memory": Backend("memory", lambda request, tmp: "memory://"),
    "sqlite": Backend(
        "sqlite",
        lambda request, tmp: f"sqlite:///{tmp / 'store' / 'runs.db'}",
        footprint=_sqlite_footprint,
        corrupt=_sqlite_corrupt,
        set_schema_version=_sqlite_set_schema_version,
    ),
    "jsonl": Backend(
        "jsonl",
        lambda request, tmp: f"jsonl:///{tmp / 'store' / 'runs'}",
        footprint=_jsonl_footprint,
        corrupt=_jsonl_corrupt,
        set_schema_version=_jsonl_set_schema_version,
    ),
    "postgres": Backend(
        "postgres",
        lambda request, tmp: str(request.getfixturevalue("pg_database")),
        footprint=_pg_footprint,
        corrupt=_pg_corrupt,
        set_schema_version=_pg_set_schema_version,
    ),
}


@dataclass(frozen=True)
class StoreCase:
    """A backend and the URL of one fresh store of it."""

    backend: Backend
    url: str

    def open(self) -> nd.HistoryStore:
        """Open (or reopen) the store at the URL."""
        return nd.open_store(self.url)


@pytest.fixture(params=sorted(BACKENDS), ids=sorted(BACKENDS))
def store_case(request: pytest.FixtureRequest, tmp_path: Path) -> StoreCase:
    backend = BACKENDS[request.param]
    return StoreCase(backend, backend.make_url(request, tmp_path))


@pytest.fixture
def any_store(store_case: StoreCase) -> Iterator[nd.HistoryStore]:
    store = store_case.open()
    yield store
    store.close()


@pytest.fixture
def runtime_store(any_store: nd.HistoryStore, store_case: StoreCase) -> Any:
    """``any_store`` when it keeps run records (the runtime capability); else the test skips."""
    from nbdurable.durable.store import RUNTIME, supports

    if not supports(any_store, RUNTIME):
        pytest.skip(f"{store_case.backend.name} keeps no run records")
    return any_store
