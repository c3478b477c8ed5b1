"""The SQLite store's event log of schema version 6: one packed row per commit.

A commit's events are one ``event_batches`` row; reads from any offset with any
limit return exactly the log's slice; a log written by version 5 (one row per
event) reads as it is and continues in batches; a damaged batch is a
:class:`~nbdurable.StoreCorruptionError` naming the run, and the check finds it.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.events._model import NewEvent
from nbdurable.stores._check import check_store
from nbdurable.stores._packing import EVENT_TYPES, pack_json, unpack_json

from .v5_rows import as_version_5

ATTEMPT = "0123456789abcdef0123456789abcdef"


def _event(i: int, type_: str = "tool_result", op: str | None = None) -> NewEvent:
    return NewEvent(
        type=type_,
        step_index=i,
        operation_id=op,
        attempt_id=ATTEMPT if op else None,
        payload={"step_index": i, "text": f"event {i} " + "lorem ipsum " * (i % 5)},
        created_at=1_700_000_000_000 + i,
    )


def _rows(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT run_id, first, position, typeof(events), events FROM event_batches "
            "ORDER BY run_id, position"
        ).fetchall()
    finally:
        conn.close()


def test_a_commit_is_one_packed_row(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    events = [
        _event(1, "model_attempt_started", "r:model:1"),
        _event(1, "model_completed", "r:model:1"),
        _event(1, "tool_call"),
        _event(1, "a_custom_type", "elsewhere"),
    ]
    checkpoint = nd.AgentCheckpoint(
        run_id="r", step_index=1, status="running", messages=(), created_at=1
    )
    with nd.SqliteSessionStore(path) as store:
        store.append_events("r", events)
        store.save_with_events(checkpoint, [_event(1), _event(1, "step_finish")])
        written = store.read_events("r")
    rows = _rows(path)
    assert [row[:4] for row in rows] == [("r", 1, 4, "blob"), ("r", 5, 6, "blob")]
    items = json.loads(unpack_json(rows[0][4]))
    code = EVENT_TYPES.index("model_attempt_started")
    assert items[0] == [code, 1, True, ATTEMPT, events[0].payload, events[0].created_at]
    assert items[3][:4] == ["a_custom_type", 1, "elsewhere", ATTEMPT]
    assert [e.operation_id for e in written[:4]] == ["r:model:1", "r:model:1", None, "elsewhere"]
    assert [e.offset for e in written] == [1, 2, 3, 4, 5, 6]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (0,)
    finally:
        conn.close()


def test_reads_from_any_offset_with_any_limit_are_the_logs_slice(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    log: list[nd.Event] = []
    with nd.SqliteSessionStore(path) as store:
        i = 0
        for size in (1, 3, 4, 2, 5):
            log.extend(store.append_events("r", [_event(i := i + 1) for _ in range(size)]))
        assert [e.offset for e in log] == list(range(1, 16))
        for after in range(17):
            for limit in (None, 1, 2, 3, 7, 100):
                expected = log[after:] if limit is None else log[after : after + limit]
                assert store.read_events("r", after=after, limit=limit) == expected, (after, limit)


def test_a_version_5_log_reads_and_continues_in_batches(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with nd.SqliteSessionStore(path) as store:
        old = list(store.append_events("r", [_event(i) for i in range(1, 4)]))
        store.append_events("other", [_event(9)])
    assert as_version_5(path, "r") == old
    with nd.SqliteSessionStore(path) as store:
        new = list(store.append_events("r", [_event(4), _event(5)]))
        assert [e.offset for e in new] == [4, 5]
        assert store.read_events("r") == old + new
        assert store.read_events("r", after=2, limit=2) == [old[2], new[0]]
    assert check_store(f"sqlite:///{path}").clean
    with nd.SqliteSessionStore(path) as store:
        store.delete("r")
        with pytest.raises(nd.RunNotFoundError):
            store.read_events("r")
        assert [e.offset for e in store.read_events("other")] == [1]


def _replace(path: Path, sql: str, *values: object) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(sql, values)
    finally:
        conn.close()


_BATCH = "UPDATE event_batches SET events = ? WHERE position = 3"


@pytest.mark.parametrize(
    ("sql", "values"),
    [
        ("UPDATE event_batches SET events = substr(events, 1, length(events) - 3) "
         "WHERE position = 3", ()),
        ("UPDATE event_batches SET events = CAST(events || x'00' AS BLOB) WHERE position = 3", ()),
        (_BATCH, (b"\x01\xff\xff\xff\xff",)),
        (_BATCH, (b"\x09\xab\xcd\xef",)),
        (_BATCH, ("not json",)),
        (_BATCH, (pack_json('{"an":"object, not an array of events"}'),)),
        (_BATCH, (json.dumps([[0, 1, None, None, {}, 1]]),)),
        (_BATCH, (json.dumps([[99, 1, None, None, {}, 1]] * 2),)),
        (_BATCH, (json.dumps([[0, 1, None, None, {}]] * 2),)),
        (_BATCH, (json.dumps([[0, 1, None, None, "not an object", 1]] * 2),)),
        ("UPDATE event_batches SET first = 1 WHERE position = 3", ()),
        ("UPDATE event_batches SET first = x'02' WHERE position = 3", ()),
        ("DELETE FROM event_batches WHERE position = 3", ()),
    ],
    ids=[
        "truncated", "trailing", "garbage", "codec", "text", "object", "too few", "type code",
        "short event", "payload", "first", "first not a number", "missing",
    ],
)  # fmt: skip
def test_a_damaged_batch_is_store_corruption_and_the_check_names_the_run(
    tmp_path: Path, sql: str, values: tuple[object, ...]
) -> None:
    path = tmp_path / "runs.db"
    with nd.SqliteSessionStore(path) as store:
        store.append_events("run-x", [_event(1, "tool_call")])
        store.append_events("run-x", [_event(2), _event(3, "step_finish")])
        store.append_events("run-x", [_event(4)])
        store.append_events("run-y", [_event(1), _event(2), _event(3)])
    _replace(path, sql.replace("WHERE", "WHERE run_id = 'run-x' AND"), *values)
    with nd.SqliteSessionStore(path) as store:
        with pytest.raises(nd.StoreCorruptionError, match="run-x") as caught:
            store.read_events("run-x")
        assert caught.value.run_id == "run-x"
        assert "zlib" not in type(caught.value.__cause__).__module__
        assert len(store.read_events("run-x", limit=1)) == 1  # what comes before still reads
        assert len(store.read_events("run-y")) == 3
    report = check_store(f"sqlite:///{path}")
    assert not report.clean and report.affected_runs == ["run-x"], report.lines()


def test_batches_larger_than_a_key_row_keeps_on_its_page_take_no_page_each(
    tmp_path: Path,
) -> None:
    # A WITHOUT ROWID row keeps ~490 bytes on a 2 KB page and spills the rest into an
    # overflow page of its own: 200 batches of ~700 bytes would then take ~400 KB.
    path = tmp_path / "runs.db"
    noise = random.Random(5)
    with nd.SqliteSessionStore(path) as store:
        for i in range(200):
            payload = {"result": noise.randbytes(550).hex()[:1100]}
            store.append_events("r", [NewEvent(type="tool_result", payload=payload, created_at=i)])
    conn = sqlite3.connect(path)
    try:
        (stored,) = conn.execute("SELECT sum(length(events)) FROM event_batches").fetchone()
        (used,) = conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name = 'event_batches'"
        ).fetchone()
    finally:
        conn.close()
    assert stored > 200 * 500
    assert used < 1.5 * stored, (used, stored)
