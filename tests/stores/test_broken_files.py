"""Broken store files, made for real: truncated, a bad header, inverted bytes at several
offsets, text that is not UTF-8 written into TEXT columns by raw sqlite3, damaged
JSONL lines. Every read either returns what the sound file held or raises a
StoreCorruptionError naming the file and ``nbdurable store check``; the check
names the runs the damage hits (``benchmarks/corruption_sweep.py`` runs every offset).
"""

from __future__ import annotations

import shutil
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest
from support import broken_harness as harness

import nbdurable as nd
from nbdurable.stores._check import check_store
from nbdurable.stores._packing import unpack_json


@pytest.fixture(scope="module")
def sound_sqlite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, harness.Reads]:
    path = tmp_path_factory.mktemp("sound") / "runs.db"
    harness.build(f"sqlite:///{path}")
    reads, errors = harness.observe(f"sqlite:///{path}")
    assert errors == []
    return path, reads


@pytest.fixture(scope="module")
def sound_jsonl(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, harness.Reads]:
    path = tmp_path_factory.mktemp("sound") / "runs"
    harness.build(f"jsonl:///{path}")
    reads, errors = harness.observe(f"jsonl:///{path}")
    assert errors == []
    return path, reads


def _copy(sound: Path, tmp_path: Path) -> Path:
    target = tmp_path / "runs.db"
    shutil.copyfile(sound, target)
    return target


def test_the_sound_store_checks_clean(sound_sqlite: tuple[Path, harness.Reads]) -> None:
    path, _ = sound_sqlite
    report = check_store(f"sqlite:///{path}")
    assert report.clean, report.lines()
    assert report.counts["runs"] == 3 and report.counts["checkpoints"] == 3 * (harness.STEPS + 1)
    assert report.counts["events"] > 0


@pytest.mark.parametrize("keep", [0.5, 0.9, 100 / 4096, 4096 + 100], ids=str)
def test_a_truncated_file_is_store_corruption(
    sound_sqlite: tuple[Path, harness.Reads], tmp_path: Path, keep: float
) -> None:
    sound, reads = sound_sqlite
    target = tmp_path / "runs.db"
    size = sound.stat().st_size
    length = int(size * keep) if keep < 1 else int(keep)
    harness.damage(sound, target, lambda data: data[:length])
    outcome = harness.judge(f"sqlite:///{target}", reads)
    assert harness.problems(outcome, target) == []
    assert outcome.failed  # a truncated store does not read as the whole one
    assert outcome.report is not None and not outcome.report.clean


def test_a_bad_header_is_store_corruption_naming_the_file_and_the_check(
    sound_sqlite: tuple[Path, harness.Reads], tmp_path: Path
) -> None:
    sound, _ = sound_sqlite
    target = tmp_path / "runs.db"
    harness.damage(sound, target, lambda data: b"not a database!!" + data[16:])
    with pytest.raises(nd.StoreCorruptionError) as caught:
        nd.open_store(f"sqlite:///{target}")
    message = str(caught.value)
    assert str(target) in message and "file is not a database" in message
    assert f"nbdurable store check sqlite:///{target}" in message and "backup" in message
    assert caught.value.path == str(target)
    report = check_store(f"sqlite:///{target}")
    assert not report.clean and "not a readable SQLite database" in report.lines()[0]


def _node_with(path: Path, needle: str) -> tuple[bytes, bytes]:
    """``(id, parent)`` of the message node whose JSON holds ``needle`` (packed or not)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT id, parent, message FROM nodes").fetchall()
    finally:
        conn.close()
    (found,) = [(nid, parent) for nid, parent, m in rows if needle in unpack_json(m)]
    return found


def _message_offset(path: Path, needle: str) -> int:
    """An offset inside the stored message of the node whose JSON holds ``needle``.

    The message may be packed: the node's row is found by its id and parent
    (the row holds id, parent, message in that order), and the offset is past them.
    """
    nid, parent = _node_with(path, needle)
    return _offset_in(path, nid + parent, "nodes") + len(nid + parent) + 4


def _offset_in(path: Path, needle: bytes, table: str) -> int:
    """The offset of ``needle`` on a page of ``table`` (SQLite's dbstat maps pages)."""
    conn = sqlite3.connect(path)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = {p for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ?", (table,))}
    finally:
        conn.close()
    data = path.read_bytes()
    offset = data.find(needle)
    while offset >= 0 and offset // page_size + 1 not in pages:
        offset = data.find(needle, offset + 1)
    assert offset > 0, needle
    return offset


@pytest.mark.parametrize("fraction", [0.2, 0.35, 0.5, 0.65, 0.8, 0.95])
def test_inverted_bytes_in_the_middle_read_the_same_or_raise_typed_errors(
    sound_sqlite: tuple[Path, harness.Reads], tmp_path: Path, fraction: float
) -> None:
    sound, reads = sound_sqlite
    target = tmp_path / "runs.db"
    harness.damage(sound, target, harness.flip(int(sound.stat().st_size * fraction), 64))
    outcome = harness.judge(f"sqlite:///{target}", reads)
    assert harness.problems(outcome, target) == []


def test_damage_inside_one_runs_message_names_that_run_only(
    sound_sqlite: tuple[Path, harness.Reads], tmp_path: Path
) -> None:
    sound, reads = sound_sqlite
    target = tmp_path / "runs.db"
    offset = _message_offset(sound, "probe result 2 of run-1")
    harness.damage(sound, target, harness.flip(offset, 4))
    outcome = harness.judge(f"sqlite:///{target}", reads)
    assert harness.problems(outcome, target) == []
    assert outcome.report is not None and outcome.report.affected_runs == ["run-1"]
    assert {name for name in outcome.failed} >= {"run-1 load"}
    assert not any(name.startswith(("run-0", "run-2")) for name in outcome.failed)
    # the steps before the damaged message still load
    store = nd.open_store(f"sqlite:///{target}")
    try:
        assert store.load("run-1", 1) == reads["run-1 load 1"]
        with pytest.raises(nd.StoreCorruptionError, match="run-1"):
            store.load("run-1")
    finally:
        store.close()


def _raw_update(path: Path, sql: str, *args: object) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql, args)
        conn.commit()
    finally:
        conn.close()


NOT_UTF8 = "CAST(X'7B2262616420FF20627974657322' AS TEXT)"  # {"bad \xff bytes"


@pytest.mark.parametrize(
    ("sql", "read", "run"),
    [
        (
            f"UPDATE nodes SET message = {NOT_UTF8} WHERE id = ?",
            lambda store: store.load("run-2"),
            "run-2",
        ),
        (
            f"UPDATE checkpoints SET usage = {NOT_UTF8} WHERE run_id = 'run-0' AND seq = 2",
            lambda store: store.history("run-0"),
            "run-0",
        ),
        (
            f"UPDATE event_batches SET events = {NOT_UTF8} "
            "WHERE run_id = 'run-1' AND first <= 3 AND position >= 3",
            lambda store: _events(store, "run-1"),
            "run-1",
        ),
    ],
    ids=["message", "checkpoint metadata", "event payload"],
)
def test_text_that_is_not_utf8_is_store_corruption_and_the_check_names_the_run(
    sound_sqlite: tuple[Path, harness.Reads], tmp_path: Path, sql: str, read: Any, run: str
) -> None:
    sound, reads = sound_sqlite
    target = _copy(sound, tmp_path)
    if "?" in sql:  # the message: its node found by content, which may be packed
        _raw_update(target, sql, _node_with(target, "probe result 1 of run-2")[0])
    else:
        _raw_update(target, sql)
    store = nd.open_store(f"sqlite:///{target}")
    try:
        with pytest.raises(nd.StoreCorruptionError) as caught:
            read(store)
        assert str(target) in str(caught.value) and "nbdurable store check" in str(caught.value)
    finally:
        store.close()
    outcome = harness.judge(f"sqlite:///{target}", reads)
    assert harness.problems(outcome, target) == []
    assert outcome.report is not None and outcome.report.affected_runs == [run]


def _events(store: Any, run_id: str) -> list[Any]:
    import asyncio

    return list(asyncio.run(nd.events.read_events(store, run_id)))


async def test_a_runtime_record_that_does_not_decode_is_store_corruption(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = nd.open_store(f"sqlite:///{path}")
    agent = nd.Agent("a", nd.ScriptedModel(["hello"] * 3, mode="sequential"), version="1")
    async with await nd.DurableRuntime.open(store=store, agents=[agent]) as runtime:
        run = await runtime.submit("a", "hi")
        await run.result()
    store.close()
    _raw_update(path, f"UPDATE rt_runs SET record = {NOT_UTF8} WHERE run_id = '{run.run_id}'")
    _raw_update(path, 'UPDATE rt_runs SET record = \'{"not": "a record"}\'')
    store = nd.open_store(f"sqlite:///{path}")
    try:
        with pytest.raises(nd.StoreCorruptionError, match="run record"):
            store.rt_get(run.run_id)
    finally:
        store.close()
    report = check_store(f"sqlite:///{path}")
    assert report.affected_runs == [run.run_id]


# -- JSONL ------------------------------------------------------------------------------


def _jsonl_copy(sound: Path, tmp_path: Path) -> Path:
    target = tmp_path / "runs"
    shutil.copytree(sound, target)
    return target


def test_jsonl_torn_last_line_is_a_note_and_earlier_saves_read(
    sound_jsonl: tuple[Path, harness.Reads], tmp_path: Path
) -> None:
    sound, _ = sound_jsonl
    target = _jsonl_copy(sound, tmp_path)
    path = nd.JsonlSessionStore(target).path_for("run-1")
    data = path.read_bytes()
    path.write_bytes(data + b'{"run_id": "run-1", "step_in')  # a save cut by a crash
    with pytest.warns(RuntimeWarning, match="torn last line"):
        assert nd.JsonlSessionStore(target).load("run-1") is not None
    report = check_store(f"jsonl:///{target}")
    assert report.clean and any("torn last line" in note for note in report.notes)


@pytest.mark.parametrize("where", ["middle", "last"])
def test_jsonl_garbage_line_is_damage_naming_the_run(
    sound_jsonl: tuple[Path, harness.Reads], tmp_path: Path, where: str
) -> None:
    sound, reads = sound_jsonl
    target = _jsonl_copy(sound, tmp_path)
    path = nd.JsonlSessionStore(target).path_for("run-2")
    lines = path.read_bytes().split(b"\n")
    index = 2 if where == "middle" else len(lines) - 2
    lines[index] = b"\xff\xfe garbage, not JSON"
    path.write_bytes(b"\n".join(lines))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        outcome = harness.judge(f"jsonl:///{target}", reads)
    assert harness.problems(outcome, target) == []
    assert outcome.report is not None and outcome.report.affected_runs == ["run-2"]
    if where == "middle":
        assert isinstance(outcome.failed["run-2 load"], nd.StoreCorruptionError)


@pytest.mark.parametrize("fraction", [0.1, 0.4, 0.7, 0.99])
def test_jsonl_inverted_bytes_read_the_same_or_raise_typed_errors(
    sound_jsonl: tuple[Path, harness.Reads], tmp_path: Path, fraction: float
) -> None:
    sound, reads = sound_jsonl
    target = _jsonl_copy(sound, tmp_path)
    path = nd.JsonlSessionStore(target).path_for("run-0")
    harness.damage(path, path, harness.flip(int(path.stat().st_size * fraction), 16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        outcome = harness.judge(f"jsonl:///{target}", reads)
    assert harness.problems(outcome, target) == []
    assert outcome.report is not None and outcome.report.affected_runs == ["run-0"]
