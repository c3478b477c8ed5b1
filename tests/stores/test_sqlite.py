"""What is particular to the SQLite store: schema, migrations, shared nodes, garbage collection."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from support.reseal import reseal

import nbdurable as nd
from nbdurable.stores._chain import encode_message, node_id
from nbdurable.stores._packing import unpack_json
from nbdurable.stores.sqlite._schema import SCHEMA_VERSION

from .test_conformance import checkpoint, histories, step_pair


def count(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


def test_a_new_file_gets_the_schema_in_wal_mode(db: Path) -> None:
    store = nd.SqliteSessionStore(db)
    store.close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {
            "nbdurable_schema",
            "nodes",
            "runs",
            "checkpoints",
            "events",
            "event_batches",
        } <= tables
        assert (
            conn.execute("SELECT max(version) FROM nbdurable_schema").fetchone()[0]
            == SCHEMA_VERSION
        )
    finally:
        conn.close()
    assert SCHEMA_VERSION == 7


def test_an_existing_database_without_our_tables_is_migrated(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.commit()
    conn.close()
    with nd.SqliteSessionStore(db) as store:
        store.save(checkpoint("r", 0, histories(1)[0]))
    assert count(db, "notes") == 0 and count(db, "checkpoints") == 1


def test_several_processes_opening_a_new_file_at_once(db: Path) -> None:
    code = (
        "import sys, nbdurable as nd\n"
        "s = nd.open_store('sqlite:///' + sys.argv[1])\n"
        "s.save(nd.AgentCheckpoint(run_id=sys.argv[2], step_index=0, status='running',"
        " messages=(nd.user('hi'),), created_at=1))\n"
        "s.close()\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(db), f"p{n}"], stderr=subprocess.PIPE, text=True
        )
        for n in range(6)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    with nd.SqliteSessionStore(db) as store:
        assert sorted(store.list()) == [f"p{n}" for n in range(6)]
    # one shared message node: the six runs have the same history
    assert count(db, "nodes") == 1
    assert count(db, "nbdurable_schema") == SCHEMA_VERSION  # each migration ran once


def test_appends_and_forks_store_each_message_once(db: Path) -> None:
    h = histories(10)
    with nd.SqliteSessionStore(db) as store:
        for i, messages in enumerate(h):
            store.save(checkpoint("a", i, messages))
        assert count(db, "nodes") == len(h[-1])
        store.save(checkpoint("a", 9, h[-1]))  # the same history again: no new node
        assert count(db, "nodes") == len(h[-1])
        fork = (*h[4][:7], nd.user("Only older than 90 days."))
        store.save(checkpoint("b", 3, fork))
        assert count(db, "nodes") == len(h[-1]) + 1  # only the edited message is new
        # equal messages built afresh (not the same objects) are still recognised
        rebuilt = tuple(nd.Message.model_validate_json(encode_message(m)) for m in h[-1])
        store.save(checkpoint("c", 9, (*rebuilt, *step_pair(10))))
        assert count(db, "nodes") == len(h[-1]) + 1 + 2


def test_node_ids_hash_the_parent_and_the_message(db: Path) -> None:
    messages = histories(1)[0]
    with nd.SqliteSessionStore(db) as store:
        store.save(checkpoint("a", 0, messages))
    conn = sqlite3.connect(db)
    rows = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, parent, message FROM nodes")}
    head = conn.execute("SELECT head FROM checkpoints").fetchone()[0]
    conn.close()
    parent = None
    for message in messages:
        nid = node_id(parent, encode_message(message))
        stored_parent, stored = rows[nid]
        assert (stored_parent, unpack_json(stored)) == (parent, encode_message(message))
        parent = nid
    assert head == parent


def test_delete_collects_only_unshared_nodes(db: Path) -> None:
    h = histories(8)
    with nd.SqliteSessionStore(db) as store:
        for i, messages in enumerate(h):
            store.save(checkpoint("a", i, messages))
        fork = (*h[2][:5], nd.user("edit"))
        store.save(checkpoint("b", 2, fork))
        store.delete("a")
        assert count(db, "nodes") == len(fork)
        assert store.load("b") == checkpoint("b", 2, fork)
        store.delete("b")
        assert count(db, "nodes") == 0 and count(db, "checkpoints") == 0 and count(db, "runs") == 0


def test_a_run_deleted_by_another_process_is_written_whole_again(db: Path) -> None:
    h = histories(4)
    first = nd.SqliteSessionStore(db)
    for i in range(3):
        first.save(checkpoint("r", i, h[i]))
    with nd.SqliteSessionStore(db) as other:
        other.delete("r")
    first.save(checkpoint("r", 3, h[3]))  # its cached chain names nodes that are gone
    first.close()
    with nd.SqliteSessionStore(db) as fresh:
        assert fresh.load("r") == checkpoint("r", 3, h[3])
        assert [i.step_index for i in fresh.history("r")] == [3]


def test_a_chain_cycle_is_reported_not_followed(db: Path) -> None:
    h = histories(3)
    with nd.SqliteSessionStore(db) as store:
        store.save(checkpoint("r", 2, h[2]))
    conn = sqlite3.connect(db, isolation_level=None)
    head = conn.execute("SELECT head FROM checkpoints").fetchone()[0]
    root = conn.execute("SELECT id FROM nodes WHERE parent IS NULL").fetchone()[0]
    conn.execute("UPDATE nodes SET parent = ? WHERE id = ?", (head, root))
    conn.close()
    with nd.SqliteSessionStore(db) as store, pytest.raises(nd.StoreCorruptionError, match="step 2"):
        store.load("r")


def test_unknown_optional_fields_from_a_newer_version_are_ignored(db: Path) -> None:
    with nd.SqliteSessionStore(db) as store:
        store.save(checkpoint("r", 0, histories(1)[0]))
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("""UPDATE checkpoints SET extra = '{"from_the_future": "x#1"}'""")
    conn.close()
    reseal(db)  # a newer release checksums what it writes
    with nd.SqliteSessionStore(db) as store:
        assert store.load("r") == checkpoint("r", 0, histories(1)[0])


def test_bad_synchronous_setting(db: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        nd.SqliteSessionStore(db, synchronous="sometimes")


def test_a_message_that_hashes_right_but_does_not_decode_is_corruption(db: Path) -> None:
    h = histories(2)
    with nd.SqliteSessionStore(db) as store:
        store.save(checkpoint("r", 1, h[1]))
    conn = sqlite3.connect(db, isolation_level=None)
    head, parent = conn.execute(
        "SELECT n.id, n.parent FROM checkpoints c JOIN nodes n ON n.id = c.head"
    ).fetchone()
    bad = '{"role": "robot", "content": []}'
    forged = node_id(parent, bad)  # a consistent chain whose last message is not a Message
    conn.execute("UPDATE nodes SET id = ?, message = ? WHERE id = ?", (forged, bad, head))
    conn.execute("UPDATE checkpoints SET head = ?", (forged,))
    conn.close()
    reseal(db)  # a forgery that passes the row checksum too
    with nd.SqliteSessionStore(db) as store:
        with pytest.raises(nd.StoreCorruptionError, match="does not decode") as caught:
            store.load("r")
        assert (caught.value.run_id, caught.value.step_index) == ("r", 1)
