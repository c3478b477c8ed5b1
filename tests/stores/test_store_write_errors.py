"""A full disk or a read-only file: a typed StoreWriteError, and no committed step lost.

Real conditions: SQLite's ``max_page_count`` (SQLITE_FULL, on every machine), a
tiny tmpfs that fills up and a tmpfs remounted read-only (as root with mount
rights; skipped elsewhere), and SQLite's ``query_only`` (SQLITE_READONLY).
A loop run logs each refused save and goes on (the seed's rule for a failed
save); what was committed before stays loadable and checks clean; once there
is room again the run resumes from its last committed step.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.stores._check import check_store

STEPS = 40
# Incompressible (the SQLite store packs JSON): each result costs its size on disk.
BIG = random.Random(7).randbytes(1500).hex()


def _probe(ran: list[int]) -> nd.Tool:
    @nd.tool
    def probe(i: int) -> str:
        """Probe a value (a large result, so the store grows fast)."""
        ran.append(i)
        return f"{i}:{BIG}"

    return probe


def _model() -> nd.ScriptedModel:
    return nd.ScriptedModel([*(nd.Turn.call("probe", i=i) for i in range(STEPS)), "all probed"])


async def _run(store: Any, ran: list[int], deps: nd.Deps, run_id: str = "run-1") -> Any:
    return await nd.generate_text(
        model=_model(),
        messages="Probe everything.",
        tools=[_probe(ran)],
        max_steps=STEPS + 2,
        session=nd.DurableSession(store, run_id=run_id),
        deps=deps,
    )


def _assert_committed_steps_load(url: str, run_id: str = "run-1") -> int:
    """Every committed checkpoint loads, and the check finds no damage; returns their count."""
    store = nd.open_store(url)
    try:
        infos = store.history(run_id)
        for info in infos:
            assert store.load(run_id, info.step_index).step_index == info.step_index
    finally:
        store.close()
    report = check_store(url)
    assert report.clean, report.lines()
    return len(infos)


def _limit_pages(store: Any, pages: int) -> None:
    # SQLite's own limit on the file size, set on each of the store's connections
    # (the one for calls on a store thread, the one for calls that never wait):
    # the disk-full path (SQLITE_FULL) without needing a small file system.
    for conn in (store._db.conn, store._db.nowait_conn):
        if conn is not None:
            conn.execute(f"PRAGMA max_page_count = {pages}")


async def test_sqlite_full_disk_is_a_typed_logged_error_and_the_run_resumes_after(
    tmp_path: Path, deps: nd.Deps, logger: Any
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = nd.open_store(url)
    used = store._db.conn.execute("PRAGMA page_count").fetchone()[0]
    _limit_pages(store, used + 12)
    ran: list[int] = []
    result = await _run(store, ran, deps)
    assert result.text == "all probed" and ran == list(range(STEPS))  # the run went on
    refused = [e for e in logger.errors if "StoreWriteError" in e]
    assert refused and all("the disk is full" in e and "runs.db" in e for e in refused)
    store.close()
    committed = _assert_committed_steps_load(url)
    assert 0 < committed < STEPS + 1
    # room again: resuming continues from the last committed step, and saves again
    store = nd.open_store(url)
    resumed = await nd.resume_from_checkpoint(
        store, "run-1", model=_model(), tools=[_probe(ran)], max_steps=STEPS + 2, deps=deps
    )
    assert resumed.text == "all probed"
    assert store.load("run-1").status == "completed"
    store.close()
    assert _assert_committed_steps_load(url) == STEPS + 1


async def test_sqlite_read_only_connection_is_a_typed_error(tmp_path: Path, deps: nd.Deps) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = nd.open_store(url)
    await _run(store, [], deps, run_id="before")
    store._db.conn.execute("PRAGMA query_only = 1")  # SQLite refuses every write: SQLITE_READONLY
    checkpoint = store.load("before")
    with pytest.raises(nd.StoreWriteError) as caught:
        store.save(checkpoint.model_copy(update={"run_id": "after", "step_id": "after#0"}))
    assert caught.value.reason == "readonly" and caught.value.path == f"{tmp_path}/runs.db"
    assert "read-only" in str(caught.value)
    assert store.load("before") == checkpoint
    store.close()
    assert _assert_committed_steps_load(url, "before") == STEPS + 1


async def test_runtime_on_a_full_store_refuses_submissions_and_leaves_runs_to_resume(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    store = nd.open_store(url)
    ran: list[int] = []
    # a "safe" tool runs again when its result could not be recorded
    agent = nd.Agent(
        "prober",
        _model(),
        [_probe(ran)],
        version="1",
        max_steps=STEPS + 2,
        tool_recovery={"probe": "safe"},
    )
    async with await nd.DurableRuntime.open(
        store=store, agents=[agent], lease_ms=300, poll_interval=0.02
    ) as runtime:
        run = await runtime.submit("prober", "Probe everything.")
        used = store._db.conn.execute("PRAGMA page_count").fetchone()[0]
        _limit_pages(store, used + 12)
        deadline = asyncio.get_running_loop().time() + 20
        while len(ran) < 3 or store._db.conn.execute("PRAGMA page_count").fetchone()[0] < used + 12:
            assert asyncio.get_running_loop().time() < deadline, "the store never filled up"
            await asyncio.sleep(0.02)
        with pytest.raises(nd.StoreWriteError):
            await _submit_until_refused(runtime)
        await asyncio.sleep(0.5)
        assert not run.record().finished  # not failed for the store's trouble
        _limit_pages(store, 1_000_000)  # room again: the lease lapses, a claim resumes it
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "all probed"
    store.close()
    assert _assert_committed_steps_load(url, run.run_id) >= 1


async def _submit_until_refused(runtime: Any) -> None:
    for _ in range(50):  # a submission is small: it fails once the file is full
        await runtime.submit("prober", "Another.")


# -- a real small file system (root with mount rights) --------------------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` up to ``leave`` free bytes; returns the filler file."""
    filler = disk / "filler"
    stat = os.statvfs(disk)
    filler.write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
    return filler


@pytest.mark.filterwarnings("ignore:ignored a torn last line")  # JSONL: a half-written line
@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
async def test_a_full_file_system_is_a_typed_error_and_loses_no_committed_step(
    tiny_disk: Path, kind: str, deps: nd.Deps, logger: Any
) -> None:
    url = f"sqlite:///{tiny_disk}/runs.db" if kind == "sqlite" else f"jsonl:///{tiny_disk}/runs"
    store = nd.open_store(url)
    filler = _fill(tiny_disk, 100_000)
    ran: list[int] = []
    result = await _run(store, ran, deps)
    assert result.text == "all probed" and ran == list(range(STEPS))
    refused = [e for e in logger.errors if "StoreWriteError" in e]
    assert refused and all("the disk is full" in e for e in refused)
    store.close()
    committed = _assert_committed_steps_load(url)
    assert 0 < committed < STEPS + 1
    filler.unlink()
    store = nd.open_store(url)
    resumed = await nd.resume_from_checkpoint(
        store, "run-1", model=_model(), tools=[_probe(ran)], max_steps=STEPS + 2, deps=deps
    )
    assert resumed.text == "all probed" and store.load("run-1").status == "completed"
    store.close()
    assert _assert_committed_steps_load(url) > committed


def test_a_read_only_file_system_is_a_typed_error_at_open(tiny_disk: Path) -> None:
    url = f"sqlite:///{tiny_disk}/runs.db"
    nd.open_store(url).close()
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True)
    try:
        with pytest.raises(nd.StoreWriteError) as caught:
            nd.open_store(url)
        assert caught.value.reason == "readonly" and str(tiny_disk) in str(caught.value)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tiny_disk)], check=True)
