"""The SQLite store's packed values (schema version 5) read back exactly as written.

Every event type, odd text (NUL, emoji, line separators, replacement characters),
large and incompressible payloads come back from ``read_events`` as the very
events appended; checkpoints and histories too. Event rows as version 5 wrote
them (one per event, packed) and in the older encoding (JSON text, as version 4
wrote them) read the same way beside each other, and a damaged packed value is a
:class:`~nbdurable.StoreCorruptionError` naming the run, never a zlib error.
Version 6's event batches have their own tests (``test_sqlite_events.py``).
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.reseal import reseal

import nbdurable as nd
from nbdurable.events import _model as event_model
from nbdurable.events._model import NewEvent
from nbdurable.stores._check import check_store
from nbdurable.stores._packing import (
    DICTIONARIES,
    EVENT_TYPES,
    MESSAGES_DICTIONARY,
    pack_json,
    unpack_json,
)
from nbdurable.stores.sqlite._rows import compact_json

from .v5_rows import as_version_5

ODD = 'nul \x00 emoji \U0001f600 sep \u2028\u2029 rtl \u202e fffd \ufffd quote " back \\ end'
INCOMPRESSIBLE = random.Random(3).randbytes(60_000).hex()


def _payloads() -> list[dict[str, Any]]:
    return [
        {},
        {"step_index": 3},
        {"text": ODD, "nested": {"list": [1, 2.5, None, True, ODD]}},
        {"big": "lorem ipsum " * 20_000},
        {"random": INCOMPRESSIBLE},
        {"z": 1, "a": 2, "m": [{"y": 1, "b": 2}]},  # key order kept
    ]


def _events() -> list[NewEvent]:
    found = []
    constants = {
        value
        for name in event_model.__all__
        if name.isupper() and isinstance(value := getattr(event_model, name), str)
    }
    # every coded type, every type the package names (coded or not), and others
    names = [*EVENT_TYPES, *sorted(constants - set(EVENT_TYPES)), "a_custom_type", "3", ""]
    for i, name in enumerate(names):
        for j, payload in enumerate(_payloads()):
            found.append(
                NewEvent(
                    type=name,
                    step_index=None if j == 0 else i,
                    operation_id=[None, f"r:model:{i}", "r:model:999", "op"][j % 4],
                    attempt_id=[
                        None,
                        "0123456789abcdef0123456789abcdef",
                        "ABCDEF0123456789ABCDEF0123456789",
                        "not-hex",
                    ][j % 4],
                    payload=payload,
                    created_at=1_700_000_000_000 + i,
                )
            )
    return found


def test_every_event_type_and_payload_reads_back_exactly(tmp_path: Path) -> None:
    events = _events()
    with nd.SqliteSessionStore(tmp_path / "runs.db") as store:
        written = list(store.append_events("r", events))
        read = store.read_events("r")
    assert read == written
    for event, original in zip(read, events, strict=True):
        assert event.model_dump() == {
            **original.model_dump(),
            "run_id": "r",
            "offset": event.offset,
        }
        assert list(event.payload) == list(original.payload)  # the same key order
    with nd.SqliteSessionStore(tmp_path / "runs.db") as store:  # a fresh connection too
        assert store.read_events("r") == written
    assert check_store(f"sqlite:///{tmp_path / 'runs.db'}").clean


def test_version_5_event_rows_are_packed(tmp_path: Path) -> None:
    event = NewEvent(
        type="tool_result",
        step_index=4,
        operation_id="r:model:4",
        attempt_id="0123456789abcdef0123456789abcdef",
        payload={"step_index": 4, "result": {"type": "tool_result", "result": "x" * 500}},
        created_at=1,
    )
    with nd.SqliteSessionStore(tmp_path / "runs.db") as store:
        store.append_events("r", [event])
    as_version_5(tmp_path / "runs.db", "r")
    conn = sqlite3.connect(tmp_path / "runs.db")
    try:
        row = conn.execute("SELECT type, operation_id, attempt_id, payload FROM events").fetchone()
    finally:
        conn.close()
    assert row[0] == bytes([EVENT_TYPES.index("tool_result")])
    assert row[1] == b"" and row[2] == bytes.fromhex(event.attempt_id or "")
    assert isinstance(row[3], bytes) and len(row[3]) < 60
    assert json.loads(unpack_json(row[3])) == event.payload


def test_old_text_rows_read_beside_packed_ones(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with nd.SqliteSessionStore(path) as store:
        written = list(store.append_events("r", _events()[:12]))
    assert as_version_5(path, "r") == written
    conn = sqlite3.connect(path, isolation_level=None)
    # Rewrite every other row as schema version 4 wrote it: plain text and JSON.
    for event in written[::2]:
        conn.execute(
            "UPDATE events SET type = ?, operation_id = ?, attempt_id = ?, payload = ? "
            "WHERE run_id = 'r' AND position = ?",
            (
                event.type,
                event.operation_id,
                event.attempt_id,
                json.dumps(event.payload, separators=(",", ":"), ensure_ascii=False),
                event.offset,
            ),
        )
    conn.close()
    with nd.SqliteSessionStore(path) as store:
        assert store.read_events("r") == written
    assert check_store(f"sqlite:///{path}").clean


def _checkpoint(step: int) -> nd.AgentCheckpoint:
    messages = [nd.user(ODD)]
    for i in range(step):
        messages.append(nd.assistant(f"Step {i}: " + "lorem ipsum " * 30))
    return nd.AgentCheckpoint(
        run_id="r",
        step_index=step,
        status="running",
        messages=tuple(messages),
        usage=nd.Usage(input_tokens=step, output_tokens=2 * step, total_tokens=3 * step),
        created_at=step,
    )


def test_checkpoints_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    saved = [_checkpoint(step) for step in range(4)]
    with nd.SqliteSessionStore(path) as store:
        for checkpoint in saved:
            store.save(checkpoint)
    with nd.SqliteSessionStore(path) as store:
        assert store.load("r") == saved[-1]
        assert [store.load("r", c.step_index) for c in saved] == saved
        assert [i.usage for i in store.history("r")] == [c.usage for c in saved]
        assert store.list_runs()[0].usage == saved[-1].usage
    conn = sqlite3.connect(path)
    try:
        kinds = {r[0] for r in conn.execute("SELECT typeof(message) FROM nodes")}
        usage = {r[0] for r in conn.execute("SELECT typeof(usage) FROM checkpoints")}
    finally:
        conn.close()
    assert kinds == {"blob"} and usage == {"blob"}
    assert check_store(f"sqlite:///{path}").clean


def _damage(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(sql)
    finally:
        conn.close()


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE events SET payload = substr(payload, 1, length(payload) - 3) WHERE position = 2",
        "UPDATE events SET payload = CAST(payload || x'00' AS BLOB) WHERE position = 2",
        "UPDATE events SET payload = x'01ffffffff' WHERE position = 2",
        "UPDATE events SET payload = x'09abcdef' WHERE position = 2",
        "UPDATE events SET type = x'ff' WHERE position = 2",
        "UPDATE events SET attempt_id = x'0102' WHERE position = 2",
        "UPDATE events SET operation_id = x'00' WHERE position = 2",
    ],
    ids=["truncated", "trailing", "garbage", "codec", "type", "attempt", "operation"],
)
def test_a_damaged_version_5_event_row_is_store_corruption(tmp_path: Path, sql: str) -> None:
    path = tmp_path / "runs.db"
    events = [e for e in _events() if isinstance(e.payload.get("text"), str)][:3]
    events = [
        e.model_copy(update={"attempt_id": "0123456789abcdef0123456789abcdef"}) for e in events
    ]
    with nd.SqliteSessionStore(path) as store:
        store.append_events("run-x", events)
    as_version_5(path, "run-x")
    _damage(path, sql)
    with (
        nd.SqliteSessionStore(path) as store,
        pytest.raises(nd.StoreCorruptionError, match="run-x") as caught,
    ):
        store.read_events("run-x")
    assert caught.value.run_id == "run-x"
    assert "zlib" not in type(caught.value.__cause__).__module__
    report = check_store(f"sqlite:///{path}")
    assert not report.clean and report.affected_runs == ["run-x"], report.lines()


@pytest.mark.parametrize("target", ["message", "usage"])
def test_a_damaged_packed_checkpoint_value_is_store_corruption(tmp_path: Path, target: str) -> None:
    path = tmp_path / "runs.db"
    with nd.SqliteSessionStore(path) as store:
        store.save(_checkpoint(2))
    if target == "message":
        _damage(path, "UPDATE nodes SET message = x'0201020304' WHERE typeof(message) = 'blob'")
    else:
        _damage(path, "UPDATE checkpoints SET usage = x'01ffff'")
        reseal(path)  # not caught by the row checksum: the unpacking itself refuses it
    with (
        nd.SqliteSessionStore(path) as store,
        pytest.raises(nd.StoreCorruptionError, match="run 'r' step 2") as caught,
    ):
        store.load("r")
    assert (caught.value.run_id, caught.value.step_index) == ("r", 2)
    report = check_store(f"sqlite:///{path}")
    assert not report.clean and report.affected_runs == ["r"], report.lines()


def test_short_or_unpackable_json_stays_text() -> None:
    assert pack_json("{}") == "{}"
    assert pack_json('{"a":1}') == '{"a":1}'
    noise = json.dumps({"n": random.Random(1).randbytes(40).hex()})
    packed = pack_json(noise)
    assert packed == noise or (isinstance(packed, bytes) and len(packed) < len(noise))
    assert unpack_json(pack_json(ODD * 40, MESSAGES_DICTIONARY)) == ODD * 40


def test_the_dictionaries_and_type_codes_never_change() -> None:
    # They are part of the file format: files written with them must read forever.
    digest = hashlib.sha256()
    for value in (*DICTIONARIES.values(), "|".join(EVENT_TYPES).encode()):
        digest.update(value)
    assert digest.hexdigest() == PINNED


PINNED = "036cdaa03d9d98785e51cf3cab033b5a07265e1e50e905e5ae04d584b7ec92ce"


def test_numbers_of_every_shape_read_back_as_written(tmp_path: Path) -> None:
    numbers = [1.5e-7, 1e16, -0.0, 0.1, 123456789.12345679, 10**30, 2**63, -(2**63) - 1, 0]
    event = NewEvent(type="tool_result", step_index=0, payload={"n": numbers}, created_at=1)
    with nd.SqliteSessionStore(tmp_path / "runs.db") as store:
        store.append_events("r", [event])
        (read,) = store.read_events("r")
    assert read.payload == {"n": numbers}
    assert [type(n) for n in read.payload["n"]] == [type(n) for n in numbers]
    assert str(read.payload["n"][2]) == "-0.0"


def test_text_the_fast_encoder_refuses_is_written_as_json_dumps_writes_it() -> None:
    lone = {"a": "\ud800", "b": [1, 2.5]}  # a lone surrogate: pydantic-core refuses it
    assert compact_json(lone) == json.dumps(lone, separators=(",", ":"), ensure_ascii=False)
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(RecursionError):
        compact_json(cyclic)
