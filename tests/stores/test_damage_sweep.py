"""Damaged SQLite files read as the sound file or refuse by name, never as different data.

The issue's three silent misreads, reproduced one by one on a real file (a value
changed in place, a checkpoint row gone, tool intents gone), then a small sweep
of the damage harness (``benchmarks/damage_sweep.py`` runs 1,050 variants):
every read identical to the sound file's or a ``StoreCorruptionError``, and
``nbdurable store check`` reporting damage wherever the library refused.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from support import damage_harness as harness

import nbdurable as nd
from nbdurable.stores._check import check_store


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, harness.Reads]:
    base = tmp_path_factory.mktemp("damage") / "base.db"
    harness.build(base)
    sound = harness.observe(base)
    assert not [n for n, v in sound.items() if isinstance(v, BaseException)]
    return base, sound


def _copy(base: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy.db"
    target.write_bytes(base.read_bytes())
    return target


def _in_place(path: Path, old: bytes, new: bytes) -> None:
    """Change bytes inside the file the way a bad disk would: same length, no SQL."""
    data = path.read_bytes()
    assert data.count(old) >= 1 and len(old) == len(new)
    path.write_bytes(data.replace(old, new, 1))


def test_a_tool_name_changed_in_place_is_refused_naming_the_run(
    built: tuple[Path, harness.Reads], tmp_path: Path
) -> None:
    base, sound = built
    path = _copy(base, tmp_path)
    # The misread: a stored tool intent's tool_name read "mr.ual_tool".
    _in_place(path, b'"tool_name":"manual_tool"', b'"tool_name":"mr.ual_tool"')
    store = nd.open_store(f"sqlite:///{path}")
    refused = []
    try:
        for run_id in harness.RT_RUNS:
            try:
                got = [i.model_dump() for i in store.rt_intents(run_id)]
            except nd.StoreCorruptionError as exc:
                refused.append((run_id, exc.run_id, run_id in str(exc)))
            else:
                assert got == sound[f"{run_id} rt_intents"]  # never the changed name
    finally:
        store.close()
    assert len(refused) == 1
    run_id, named, in_message = refused[0]
    assert named == run_id and in_message
    report = check_store(f"sqlite:///{path}")
    assert run_id in report.affected_runs, report.lines()
    assert asyncio.run(_events(path)) == sound["loop-0 events"]


async def _events(path: Path) -> object:
    store = nd.open_store(f"sqlite:///{path}")
    try:
        return [e.model_dump() for e in await nd.events.read_events(store, "loop-0")]
    finally:
        store.close()


def test_a_checkpoint_row_gone_is_refused_not_none(
    built: tuple[Path, harness.Reads], tmp_path: Path
) -> None:
    base, sound = built
    path = _copy(base, tmp_path)
    conn = sqlite3.connect(path)
    # As a zeroed page or a damaged cell count leaves it: the row is gone, nothing else changed.
    conn.execute("DELETE FROM checkpoints WHERE run_id = 'loop-3' AND step_index = 4")
    conn.commit()
    conn.close()
    store = nd.open_store(f"sqlite:///{path}")
    try:
        with pytest.raises(nd.StoreCorruptionError) as caught:
            store.load("loop-3", step_index=4)
        assert caught.value.run_id == "loop-3"
        with pytest.raises(nd.StoreCorruptionError):
            store.history("loop-3")
        assert store.load("loop-2", step_index=1) is not None  # other runs read on
        assert sound["loop-3 load 4"] is not None
    finally:
        store.close()
    report = check_store(f"sqlite:///{path}")
    assert "loop-3" in report.affected_runs, report.lines()


def test_tool_intents_gone_are_refused_not_fewer(
    built: tuple[Path, harness.Reads], tmp_path: Path
) -> None:
    base, _ = built
    path = _copy(base, tmp_path)
    conn = sqlite3.connect(path)
    conn.execute(
        "DELETE FROM rt_intents WHERE run_id = 'rt-1' AND tool_call_id NOT IN ('call-0-0')"
    )
    conn.commit()
    conn.close()
    store = nd.open_store(f"sqlite:///{path}")
    try:
        with pytest.raises(nd.StoreCorruptionError, match="found 1 of 6") as caught:
            store.rt_intents("rt-1")
        assert caught.value.run_id == "rt-1"
        assert len(store.rt_intents("rt-0")) == harness.INTENTS
    finally:
        store.close()
    report = check_store(f"sqlite:///{path}")
    assert "rt-1" in report.affected_runs, report.lines()


def test_a_value_changed_in_place_is_refused(
    built: tuple[Path, harness.Reads], tmp_path: Path
) -> None:
    base, _ = built
    path = _copy(base, tmp_path)
    conn = sqlite3.connect(path)
    (journal,) = conn.execute(
        "SELECT response FROM rt_journal WHERE run_id = 'rt-2' AND step_index = 1"
    ).fetchone()
    conn.close()
    _in_place(path, journal.encode(), journal.replace("response", "resp0nse").encode())
    store = nd.open_store(f"sqlite:///{path}")
    try:
        with pytest.raises(nd.StoreCorruptionError, match="rt-2"):
            store.rt_journaled("rt-2", 1)
    finally:
        store.close()
    assert "rt-2" in check_store(f"sqlite:///{path}").affected_runs


def test_rows_written_before_checksums_read_as_they_are(tmp_path: Path) -> None:
    # A file with rows of schema 6 (no crc) keeps reading them: legacy_rows is 1.
    path = tmp_path / "old.db"
    harness.build(path)
    conn = sqlite3.connect(path)
    for table in ("runs", "checkpoints", "event_batches", "rt_runs", "rt_intents", "rt_journal"):
        conn.execute(f"UPDATE {table} SET crc = NULL")
    conn.execute("DELETE FROM run_heads")
    conn.execute("UPDATE nbdurable_checksums SET legacy_rows = 1")
    conn.commit()
    conn.close()
    assert not [n for n, v in harness.observe(path).items() if isinstance(v, BaseException)]
    assert check_store(f"sqlite:///{path}").clean
    # ... while in a file created at schema 7 a row without one is damage.
    conn = sqlite3.connect(path)
    conn.execute("UPDATE nbdurable_checksums SET legacy_rows = 0")
    conn.commit()
    conn.close()
    store = nd.open_store(f"sqlite:///{path}")
    try:
        with pytest.raises(nd.StoreCorruptionError, match="loop-0"):
            store.load("loop-0")
    finally:
        store.close()


@pytest.mark.slow
def test_a_small_sweep_reads_as_the_sound_file_or_refuses(
    built: tuple[Path, harness.Reads], tmp_path: Path
) -> None:
    base, sound = built
    page_size, _ = harness.page_map(base)
    found = harness.variants(base, 40, seed=7)
    assert {v.kind for v in found} == set(harness.KINDS)
    broken = []
    for n, variant in enumerate(found):
        outcome = harness.run_variant(base, tmp_path / "copy.db", variant, sound, n, page_size)
        if outcome.differed or outcome.untyped or not outcome.agrees:
            broken.append((outcome.variant, outcome.differed, outcome.untyped, outcome.check_clean))
    assert not broken, broken


def test_deleting_runs_keeps_heads_and_graph_counts_true(
    built: tuple[Path, harness.Reads], tmp_path: Path
) -> None:
    path = _copy(built[0], tmp_path)
    store = nd.open_store(f"sqlite:///{path}")
    try:
        for run_id in ("rt-1", "g:left", "loop-2"):
            store.delete(run_id)
        assert [r.run_id for r in store.rt_graph("g")] == ["g:right", "g:join"]
        assert store.rt_intents("rt-1") == [] and store.rt_get("rt-1") is None
        assert len(store.rt_intents("rt-0")) == harness.INTENTS
    finally:
        store.close()
    report = check_store(f"sqlite:///{path}")
    assert report.clean, report.lines()


def test_a_save_does_not_seal_a_damaged_run_row_anew(
    built: tuple[Path, harness.Reads], tmp_path: Path
) -> None:
    base, _ = built
    path = _copy(base, tmp_path)
    conn = sqlite3.connect(path)
    # a damaged created_at (the checksum no longer matches): a save that re-sealed
    # the row with it would make the damage read as sound from then on
    conn.execute("UPDATE runs SET created_at = created_at + 1 WHERE run_id = 'loop-1'")
    conn.commit()
    conn.close()
    store = nd.open_store(f"sqlite:///{path}")
    try:
        latest = store.load("loop-0")
        assert latest is not None
        with pytest.raises(nd.StoreCorruptionError) as caught:
            store.save(latest.model_copy(update={"run_id": "loop-1"}))
        assert caught.value.run_id == "loop-1"
    finally:
        store.close()
    report = check_store(f"sqlite:///{path}")
    assert "loop-1" in report.affected_runs, report.lines()
