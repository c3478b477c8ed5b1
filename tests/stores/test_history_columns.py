"""A run's checkpoint metadata read as columns is ``history`` taken apart, or its error.

``history_columns`` (what ``nd.inspect.history`` reads) has a path of its own in
the SQLite store: the rows verified by one checksum pass, the usual shapes read
straight into lists. Whatever the rows hold, it lists what ``history`` lists,
or refuses with the error ``history`` raises; the checksum pass accepts exactly
the rows the per-row check accepts.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.durable._checkpoint import AgentCheckpoint, ForkPoint, StepStats
from nbdurable.stores._history_columns import HistoryColumns, history_columns
from nbdurable.stores.sqlite._checkpoints import _HISTORY
from nbdurable.stores.sqlite._crc import verify_checkpoint, verify_checkpoints


def _checkpoint(run_id: str, step: int, **fields: Any) -> AgentCheckpoint:
    values: dict[str, Any] = {
        "run_id": run_id,
        "step_index": step,
        "status": "running",
        "messages": (nd.user(f"step {step}"),),
        "usage": nd.Usage(input_tokens=step, output_tokens=1, total_tokens=step + 1),
        "created_at": 1_700_000_000_000 + step,
        "stats": StepStats(started_at=1_700_000_000_000, model_ms=step, tool_calls=("a", "b")),
    }
    values.update(fields)
    return AgentCheckpoint(**values)


UNUSUAL: dict[str, dict[str, Any]] = {
    "usual": {},
    "no stats": {"stats": None},
    "stats without calls": {"stats": StepStats(started_at=5)},
    "cost and cached tokens": {
        "usage": nd.Usage(input_tokens=3, total_tokens=3, cached_input_tokens=1, cost=0.5)
    },
    "sub-agent": {"agent_path": ("outer", "inner")},
    "forked": {"forked_from": ForkPoint(run_id="p", step_index=1)},
    "finished": {"status": "completed", "finish_reason": "stop"},
    "long usage": {"usage": nd.Usage(input_tokens=10**15, output_tokens=10**15)},
}


def _as_dict(columns: HistoryColumns) -> dict[str, Any]:
    return {f.name: getattr(columns, f.name) for f in dataclasses.fields(columns)}


def _same_as_history(store: Any, run_id: str) -> None:
    expected = HistoryColumns.from_infos(run_id, store.history(run_id))
    found = history_columns(store, run_id)
    assert _as_dict(found) == _as_dict(expected)
    for name, values in _as_dict(found).items():
        if isinstance(values, list):
            assert [type(v) for v in values] == [type(v) for v in getattr(expected, name)], name


@pytest.mark.parametrize("url", ["sqlite", "memory", "jsonl"])
def test_every_shape_of_row_lists_what_history_lists(url: str, tmp_path: Path) -> None:
    store = nd.open_store(
        {
            "sqlite": f"sqlite:///{tmp_path}/runs.db",
            "memory": "memory://",
            "jsonl": f"jsonl:///{tmp_path}/runs",
        }[url]
    )
    try:
        # Each unusual row after a usual one: one run (every save of a file syncs it).
        for step, fields in enumerate(UNUSUAL.values()):
            store.save(_checkpoint("mixed", 2 * step))
            store.save(_checkpoint("mixed", 2 * step + 1, **fields))
        _same_as_history(store, "mixed")
        assert len(history_columns(store, "nothing")) == 0
    finally:
        store.close()


def _sqlite_run(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    with nd.SqliteSessionStore(path) as store:
        for step in range(4):
            store.save(_checkpoint("r", step))
    return path


def test_rows_older_than_checksums_are_validated_and_listed(tmp_path: Path) -> None:
    path = _sqlite_run(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE checkpoints SET crc = NULL WHERE seq = 2")
    conn.execute("UPDATE nbdurable_checksums SET legacy_rows = 1")
    conn.commit()
    conn.close()
    with nd.SqliteSessionStore(path) as store:
        _same_as_history(store, "r")


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE checkpoints SET message_count = 7 WHERE seq = 2",  # the checksum says no
        "UPDATE checkpoints SET crc = NULL WHERE seq = 3",  # no checksum in a version 7 file
        "DELETE FROM checkpoints WHERE seq = 2",  # a row gone
        "UPDATE checkpoints SET usage = x'01ff' WHERE seq = 1",  # packed JSON that is no JSON
    ],
)
def test_a_damaged_row_is_refused_as_history_refuses_it(tmp_path: Path, sql: str) -> None:
    path = _sqlite_run(tmp_path)
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()
    with nd.SqliteSessionStore(path) as store:
        with pytest.raises(nd.StoreCorruptionError) as listed:
            store.history("r")
        with pytest.raises(nd.StoreCorruptionError) as read:
            history_columns(store, "r")
    assert str(read.value) == str(listed.value)
    assert (read.value.run_id, read.value.step_index) == (
        listed.value.run_id,
        listed.value.step_index,
    )


def _variants(row: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The row, and rows that differ from it in one value or one value's type."""
    found = [row]
    for i, value in enumerate(row[:-1]):
        others: list[Any] = [None, 0, "", b"", 1.5]
        if isinstance(value, str):
            others += [value.encode(), value + "x", "\udcff"]
        elif isinstance(value, bytes):
            others += [value.decode("latin-1"), value + b"x"]
        elif isinstance(value, int):
            others += [value + 1, str(value), True]
        found += [(*row[:i], other, *row[i + 1 :]) for other in others]
    found.append((*row[:-1], None))
    found.append((*row[:-1], str(row[-1])))
    found.append(row[:-1])  # a column short
    return found


def _outcome(check: Any) -> str:
    try:
        check()
    except nd.StoreCorruptionError as exc:
        return f"refused: {exc}"
    return "accepted"


@pytest.mark.parametrize("legacy", [False, True])
def test_the_checksum_pass_accepts_exactly_what_the_row_check_accepts(
    tmp_path: Path, legacy: bool
) -> None:
    path = _sqlite_run(tmp_path)
    with nd.SqliteSessionStore(path) as store:
        store.save(_checkpoint("r", 4, **UNUSUAL["finished"]))
        store.save(_checkpoint("r", 5, **UNUSUAL["forked"]))
    conn = sqlite3.connect(path)
    rows = conn.execute(_HISTORY, ("r",)).fetchall()
    conn.close()
    assert len(rows) == 6
    for row in rows:
        for variant in _variants(row):
            one = _outcome(lambda v=variant: verify_checkpoint("r", v, legacy))
            batch = _outcome(lambda v=variant: verify_checkpoints("r", [v], legacy))
            assert batch == one, variant
    assert _outcome(lambda: verify_checkpoints("r", rows, legacy)) == "accepted"
