"""SQLite writes made from async code run on the loop's thread only when they cannot wait.

Real conditions: another process holding the file's write lock (BEGIN IMMEDIATE)
or a read transaction when a run's last fold empties the log, SIGKILL mid-run,
SQLite's own ``query_only`` for a refused write. Which thread ran
a statement is read from the connections' trace callbacks.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.sqlite_locker import LockAtCall
from support.ticker import Ticker
from support.waiting import eventually

import nbdurable as nd
from nbdurable.durable._offload import offload
from nbdurable.durable._transient import StoreRetry
from nbdurable.events import TOOL_CALL
from nbdurable.stores._check import check_store
from nbdurable.stores.sqlite import _db as sqlite_nowait

from . import loop_crash

HOLD = 2.0


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _trace(store: nd.SqliteSessionStore) -> dict[str, set[int]]:
    """Thread ids that ran statements on each of the store's two connections."""
    seen: dict[str, set[int]] = {"thread": set(), "nowait": set()}
    store._db.conn.set_trace_callback(lambda _: seen["thread"].add(threading.get_ident()))
    assert store._db.nowait_conn is not None
    store._db.nowait_conn.set_trace_callback(lambda _: seen["nowait"].add(threading.get_ident()))
    return seen


def _checkpoint(run_id: str, step: int) -> nd.AgentCheckpoint:
    return nd.AgentCheckpoint(
        run_id=run_id,
        step_id=f"{run_id}#{step}",
        step_index=step,
        status="running",
        created_at=1_700_000_000_000 + step,
        messages=(nd.user("hi"), nd.assistant(f"step {step}")),
    )


async def _save_one_more(
    store: nd.SqliteSessionStore, messages: tuple[nd.Message, ...], step: int, text: str
) -> tuple[nd.Message, ...]:
    """Save run ``r`` at ``step`` from the loop: ``messages`` plus one of ``text``; that history."""
    grown = (*messages, nd.user(text))
    checkpoint = _checkpoint("r", step).model_copy(update={"messages": grown})
    await offload(store.save, checkpoint, extends=messages)
    return grown


async def test_a_run_writes_on_the_loops_thread_without_any_thread_round_trip(
    tmp_path: Path,
) -> None:
    store = nd.SqliteSessionStore(tmp_path / "runs.db")
    seen = _trace(store)
    loop_thread = threading.get_ident()
    result = await nd.generate_text(
        model=loop_crash.model(5),
        messages="Probe everything.",
        tools=[loop_crash.probe_tool(False)],
        max_steps=7,
        session=nd.DurableSession(store, run_id="r"),
    )
    assert result.text == "all probed"
    assert seen["nowait"] == {loop_thread}  # every save and append ran here
    assert [i.step_index for i in store.history("r")] == list(range(6))
    store.close()


async def test_a_write_lock_held_by_another_process_leaves_the_loop_responsive(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(db)
    seen = _trace(store)
    loop = asyncio.get_running_loop()
    lock = LockAtCall(db, HOLD, lambda i: f"{i}:{loop_crash.RESULT}")

    with Ticker() as ticker:
        result = await nd.generate_text(
            model=loop_crash.model(5),
            messages="Probe everything.",
            tools=[lock.tool],
            max_steps=7,
            session=nd.DurableSession(store, run_id="r"),
        )
        ended = loop.time()
    assert result.text == "all probed"
    assert lock.holder is not None and lock.holder.wait(timeout=30) == 0
    # the save after the lock waited for it, on a store thread, while the loop ticked on
    assert ended - lock.locked_at > HOLD * 0.6
    assert ticker.worst < HOLD / 4, ticker.worst
    assert seen["nowait"] == {threading.get_ident()}
    assert seen["thread"] - {threading.get_ident()}
    # nothing was lost: every step's checkpoint, every event in order
    assert [i.step_index for i in store.history("r")] == list(range(6))
    events = store.read_events("r")
    assert [e.offset for e in events] == list(range(1, len(events) + 1))
    assert sorted(e.step_index for e in events if e.type == TOOL_CALL) == list(range(5))
    store.close()
    assert check_store(f"sqlite:///{db}").clean


async def test_a_refused_write_on_the_loops_thread_is_the_same_typed_error(
    tmp_path: Path,
) -> None:
    store = nd.SqliteSessionStore(tmp_path / "runs.db")
    store.save(_checkpoint("before", 0))  # a running checkpoint: no WAL checkpoint follows
    copy = _checkpoint("after", 0)
    # only the connection that never waits refuses writes: the error can only come from it
    assert store._db.nowait_conn is not None
    store._db.nowait_conn.execute("PRAGMA query_only = 1")
    with pytest.raises(nd.StoreWriteError) as caught:
        await offload(store.save, copy)
    assert caught.value.reason == "readonly"
    with pytest.raises(nd.StoreWriteError):  # not transient: no retry, no fallback
        await StoreRetry(10_000).acall("save", store.save, copy)
    assert store.load("after") is None
    store._db.nowait_conn.execute("PRAGMA query_only = 0")
    await offload(store.save, copy)
    loaded = store.load("after")
    assert loaded is not None and loaded.messages == copy.messages
    store.close()


class SlowStore(nd.SqliteSessionStore):
    """A subclass whose save sleeps: an override never runs on the loop's thread."""

    def save(self, checkpoint: nd.AgentCheckpoint, **kwargs: Any) -> None:
        time.sleep(0.3)
        super().save(checkpoint, **kwargs)


async def test_an_overridden_write_method_runs_on_a_store_thread(tmp_path: Path) -> None:
    store = SlowStore(tmp_path / "runs.db")
    seen = _trace(store)
    with Ticker() as ticker:
        await offload(store.save, _checkpoint("r", 0))
    assert ticker.ticks > 0 and ticker.worst < 0.2
    assert threading.get_ident() not in seen["thread"] and not seen["nowait"]
    store.close()


def _small_log(monkeypatch: pytest.MonkeyPatch) -> int:
    """Fold the log at 512 KB and empty it at 1 MB (a few MB of saves pass both often).

    Above the 256 KB a restarted log file is cut back to (``journal_size_limit``).
    """
    monkeypatch.setattr(sqlite_nowait, "_CHECKPOINT_BYTES", 512 * 1024)
    monkeypatch.setattr(sqlite_nowait, "_WAL_CEILING", 1024 * 1024)
    return 1024 * 1024


@pytest.mark.serial  # the store's checkpoint thread must keep pace: load makes it lag
async def test_wal_checkpoints_run_off_the_loop_and_keep_the_log_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ceiling = _small_log(monkeypatch)
    db = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(db)
    assert store._db.nowait_conn is not None
    for conn in (store._db.conn, store._db.nowait_conn):
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    seen = _trace(store)
    big = "x" * 60_000
    messages: tuple[nd.Message, ...] = (nd.user("start"),)
    biggest = 0
    for step in range(200):  # ~15 pages a save: the log passes 1,000 pages many times over
        messages = (*messages, nd.user(f"{step}:{big}"))
        checkpoint = nd.AgentCheckpoint(
            run_id="r",
            step_id=f"r#{step}",
            step_index=step,
            status="running",
            created_at=1_700_000_000_000 + step,
            messages=messages,
        )
        await offload(store.save, checkpoint, extends=messages[:-1])
        biggest = max(biggest, _size(f"{db}-wal"))
    assert seen["nowait"] == {threading.get_ident()}
    assert threading.get_ident() not in seen["thread"]  # the checkpoints ran elsewhere
    # ~3.7 MB without checkpoints; a checkpoint thread that starts late lets the log
    # pass the ceiling by a few hundred KB (1.36 MB seen in CI against a 1 MB ceiling)
    assert biggest < ceiling + 512 * 1024, biggest
    store.close()
    assert _size(f"{db}-wal") == 0  # the last close folds and removes the log


def test_postgres_and_other_stores_never_take_the_path(request: pytest.FixtureRequest) -> None:
    assert not getattr(nd.InMemorySessionStore(), "local_nonblocking_writes", False)
    full = nd.SqliteSessionStore(":memory:")
    assert not full.local_nonblocking_writes  # no file: nothing to say it is local
    full.close()
    url = str(request.getfixturevalue("pg_database"))
    store = nd.open_store(url)
    try:
        assert not getattr(store, "local_nonblocking_writes", False)
        assert not hasattr(store, "try_without_waiting")
    finally:
        store.close()


def test_synchronous_full_keeps_writes_off_the_loop(tmp_path: Path) -> None:
    store = nd.SqliteSessionStore(tmp_path / "runs.db", synchronous="FULL")
    assert not store.local_nonblocking_writes  # a commit would wait for fsync
    store.close()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
@pytest.mark.parametrize("kill_at", [2, 7])
def test_a_sigkilled_async_run_loses_at_most_the_step_in_flight(
    tmp_path: Path, kill_at: int
) -> None:
    db = tmp_path / "runs.db"
    steps = 40
    proc = subprocess.Popen(
        [sys.executable, loop_crash.__file__, str(db), str(steps)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    seen = -1
    while seen < kill_at:
        line = proc.stdout.readline()
        assert line.startswith("tool "), f"the run ended early: {line!r}"
        seen = int(line.split()[1])
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert check_store(f"sqlite:///{db}").clean
    store = nd.SqliteSessionStore(db)
    infos = store.history(loop_crash.RUN_ID)
    latest = store.load(loop_crash.RUN_ID)
    assert latest is not None and latest.step_index >= seen - 1
    assert [i.step_index for i in infos] == list(range(latest.step_index + 1))
    events = store.read_events(loop_crash.RUN_ID)  # offsets without holes, or it raises
    called = {e.step_index for e in events if e.type == TOOL_CALL}
    assert set(range(seen + 1)) <= called  # each tool ran after its call was committed
    resumed = asyncio.run(
        nd.resume_from_checkpoint(
            store,
            loop_crash.RUN_ID,
            model=loop_crash.model(steps),
            tools=[loop_crash.probe_tool(False)],
            max_steps=steps + 2,
        )
    )
    assert resumed.text == "all probed"
    assert [i.step_index for i in store.history(loop_crash.RUN_ID)][-1] == steps
    store.close()


async def test_a_wal_checkpoint_in_progress_does_not_send_writes_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nonstop passive checkpoints keep the log from restarting: below the size at
    # which writes leave the loop for a TRUNCATE (the next test), whatever its size.
    monkeypatch.setattr(sqlite_nowait, "_WAL_CEILING", 1 << 40)
    db = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(db)
    assert store._db.nowait_conn is not None
    writes: dict[str, list[int]] = {"thread": [], "nowait": []}
    for name, conn in (("thread", store._db.conn), ("nowait", store._db.nowait_conn)):
        conn.set_trace_callback(
            lambda sql, name=name: (
                writes[name].append(threading.get_ident()) if sql.startswith("INSERT") else None
            )
        )
    stop = threading.Event()
    folded = 0

    def checkpoints() -> None:
        nonlocal folded
        while not stop.is_set():
            store._db.background_checkpoint()  # what a store thread runs, again and again
            folded += 1

    checkpointer = threading.Thread(target=checkpoints)
    checkpointer.start()
    try:
        big = "x" * 20_000
        messages: tuple[nd.Message, ...] = (nd.user("start"),)
        for step in range(60):
            messages = await _save_one_more(store, messages, step, f"{step}:{big}")
    finally:
        stop.set()
        checkpointer.join()
    assert folded > 0
    assert writes["thread"] == []  # no save waited for a checkpoint on a store thread
    assert set(writes["nowait"]) == {threading.get_ident()}
    assert [i.step_index for i in store.history("r")] == list(range(60))
    store.close()
    assert _size(f"{db}-wal") == 0


@pytest.mark.serial  # the store's checkpoint thread must keep pace: load makes it lag
async def test_a_log_that_passive_checkpoints_cannot_restart_is_emptied_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ceiling = _small_log(monkeypatch)
    db = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(db)
    assert store._db.nowait_conn is not None
    loop_thread = threading.get_ident()
    writes: dict[str, list[int]] = {"thread": [], "nowait": []}
    for name, conn in (("thread", store._db.conn), ("nowait", store._db.nowait_conn)):
        conn.set_trace_callback(
            lambda sql, name=name: (
                writes[name].append(threading.get_ident()) if sql.startswith("INSERT") else None
            )
        )
    stop = threading.Event()

    def checkpoints() -> None:
        while not stop.is_set():
            store._db.background_checkpoint()  # nearly always one in progress: no restart
            time.sleep(0.001)

    checkpointer = threading.Thread(target=checkpoints)
    checkpointer.start()
    biggest = 0
    try:
        messages: tuple[nd.Message, ...] = (nd.user("start"),)
        for step in range(150):
            incompressible = os.urandom(10_000).hex()  # 20 KB
            messages = await _save_one_more(store, messages, step, incompressible)
            biggest = max(biggest, _size(f"{db}-wal"))
    finally:
        stop.set()
        checkpointer.join()
    assert biggest < 2 * ceiling, biggest  # without the TRUNCATE: 150 x 20 KB and more
    assert writes["thread"] and loop_thread not in writes["thread"]  # the fold's writes
    # A fold waits for the checkpoint in progress, so it empties the log the first
    # time: a few writes leave the loop, not every write until a fold wins a race.
    assert len(writes["thread"]) <= len(writes["nowait"]) // 10, writes
    assert [i.step_index for i in store.history("r")] == list(range(150))
    store.close()


@pytest.mark.serial  # the store's checkpoint thread must keep pace: load makes it lag
async def test_a_fold_that_commits_outran_is_not_repeated_at_every_few_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop's commits go on while a store thread folds the log, so the log
    # is never folded whole and the next write does not restart it: another
    # passive fold right away would copy a few pages and sync the file twice.
    # One fold per growth of the threshold, then the TRUNCATE at the ceiling.
    _small_log(monkeypatch)
    db = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(db)
    modes: list[str] = []
    background = store._db.background_checkpoint

    def counted(empty: bool = False) -> None:
        modes.append("empty" if empty else "passive")
        time.sleep(0.005)  # a fold that takes a while, as a synced one does
        background(empty)

    monkeypatch.setattr(store._db, "background_checkpoint", counted)
    truncate = store._db.truncate_checkpoint
    folds: list[int] = []

    def emptied() -> None:
        folds.append(1)
        truncate()

    monkeypatch.setattr(store._db, "truncate_checkpoint", emptied)
    messages: tuple[nd.Message, ...] = (nd.user("start"),)
    for step in range(600):
        incompressible = os.urandom(4_000).hex()  # 8 KB
        messages = await _save_one_more(store, messages, step, incompressible)
        await asyncio.sleep(0)
    assert len(folds) >= 3, "the log seldom reached the ceiling"
    # Before: a passive fold at every 4th commit from the threshold to the ceiling.
    assert modes.count("passive") <= len(folds) + 3, (modes, folds)
    assert [i.step_index for i in store.history("r")] == list(range(600))
    store.close()
    assert _size(f"{db}-wal") == 0


async def test_a_run_that_stops_leaves_an_empty_log_with_the_store_still_open(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(db)
    reader = nd.SqliteSessionStore(db)  # another connection, between its reads
    messages: tuple[nd.Message, ...] = (nd.user("start"),)
    for step in range(40):
        messages = await _save_one_more(store, messages, step, os.urandom(4_000).hex())
    assert _size(f"{db}-wal") > 300_000  # below the size that folds it
    done = _checkpoint("r", 40).model_copy(update={"status": "completed", "messages": messages})
    await offload(store.save, done, extends=messages)
    # A store thread folds the log into the file and empties it (TRUNCATE,
    # never waiting for another connection): an idle file takes no log space.
    await eventually(lambda: _size(f"{db}-wal") == 0)
    assert reader.load("r") == done
    assert [i.step_index for i in reader.history("r")] == list(range(41))
    reader.close()
    store.close()


async def test_a_run_that_stops_during_a_fold_still_leaves_an_empty_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _small_log(monkeypatch)
    db = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(db)
    folding = threading.Event()
    background = store._db.background_checkpoint

    def slow(empty: bool = False) -> None:
        folding.set()
        time.sleep(0.3)  # a fold that syncs a slow disk
        background(empty)

    monkeypatch.setattr(store._db, "background_checkpoint", slow)
    messages: tuple[nd.Message, ...] = (nd.user("start"),)
    step = 0
    while not folding.is_set():
        messages = await _save_one_more(store, messages, step, os.urandom(4_000).hex())
        step += 1
        assert step < 200, "no fold began"
    # The run ends while the store thread's passive fold is still in progress.
    done = _checkpoint("r", step).model_copy(update={"status": "completed", "messages": messages})
    await offload(store.save, done, extends=messages)
    await eventually(lambda: _size(f"{db}-wal") == 0)
    store.close()


# Another process's reader: holds one read transaction (a snapshot) until told to end it.
_READER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
count = "SELECT count(*) FROM checkpoints"
conn.execute("BEGIN")
print(conn.execute(count).fetchone()[0], flush=True)
sys.stdin.readline()
print(conn.execute(count).fetchone()[0], flush=True)  # still its snapshot
conn.execute("COMMIT")
print(conn.execute(count).fetchone()[0], flush=True)
conn.close()
"""


def _start_reader(db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _READER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


async def test_a_run_that_stops_while_another_process_reads_keeps_its_log_and_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(db)
    messages: tuple[nd.Message, ...] = (nd.user("start"),)
    for step in range(40):
        messages = await _save_one_more(store, messages, step, os.urandom(4_000).hex())
    reader = _start_reader(db)
    assert reader.stdin is not None and reader.stdout is not None
    try:
        assert reader.stdout.readline().strip() == "40"  # its read transaction is open
        folded = threading.Event()
        background = store._db.background_checkpoint

        def watched(empty: bool = False) -> None:
            background(empty)
            folded.set()

        monkeypatch.setattr(store._db, "background_checkpoint", watched)
        done = _checkpoint("r", 40).model_copy(update={"status": "completed", "messages": messages})
        with Ticker() as ticker:
            await offload(store.save, done, extends=messages)
            await eventually(folded.is_set)
        # The run's last fold met the reader's snapshot: its TRUNCATE was refused at
        # once (the busy timeout is zero), so the log stays, and nothing waited for it.
        assert _size(f"{db}-wal") > 0
        assert ticker.worst < HOLD / 4, ticker.worst
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == "40"
        assert reader.stdout.readline().strip() == "41"  # a new snapshot: the finished run
        assert reader.wait(timeout=30) == 0
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert store.load("r") == done
    store.close()
    assert _size(f"{db}-wal") == 0  # the last connection folds it as it closes
    reopened = nd.SqliteSessionStore(db)
    assert reopened.load("r") == done
    assert [i.step_index for i in reopened.history("r")] == list(range(41))
    reopened.close()
    assert check_store(f"sqlite:///{db}").clean
