"""Store I/O never runs on the event loop's thread, and a slow store never starves a lease.

The PostgreSQL store is reached through a loopback proxy that adds 30 ms to
every round trip. Every connection the store takes from its pool records the
thread that took it: over a whole run (submit, a tool, an approval decided,
completion), and over the synchronous reads a notebook makes without ``await``
(``Run.status``, ``Run.record()``, ``list_runs()``, a graph's and a task's),
none may be the loop's thread. That is a structural check, not a timing one: it
fails on the first store call made synchronously from async code.

The tests share one database and one proxy (module fixtures): each opens its
own store through the proxy, and their runs have distinct agents and ids. Only
the lease test is ``serial``: the others check threads and notifications, which
no load changes.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from support.latency_proxy import LatencyProxy, latency_proxy
from support.pgserver import PgServer

import nbdurable as nd
from nbdurable.durable._offload import offload
from nbdurable.events._model import NewEvent
from nbdurable.runtime import Agent, DurableRuntime, TaskRun
from nbdurable.runtime import _record_mirror as record_mirror
from nbdurable.stores import open_store

DELAY = 0.03  # a far store; more only makes the ~100 round trips of a run slower
SECRET = "loop blocking test secret"
WRITER = Path(__file__).resolve().parents[1] / "support" / "remote_writer.py"


@pytest.fixture(scope="module")
def shared_database(pg_server: PgServer) -> Iterator[str]:
    """One database for this module's tests, its schema created directly (not via the proxy)."""
    name = f"t_{uuid.uuid4().hex}"
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY")
    url = f"postgresql://postgres@127.0.0.1:{pg_server.port}/{name}"
    open_store(url).close()  # migrated here: through the proxy that costs a round trip a statement
    yield url
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def slow_pg(shared_database: str) -> Iterator[tuple[str, LatencyProxy]]:
    """The database's URL through a proxy adding DELAY per round trip, and the proxy."""
    port = urlsplit(shared_database).port
    assert port is not None
    with latency_proxy("127.0.0.1", port, DELAY) as proxy:
        yield proxy.url_for(shared_database, port), proxy


class ThreadRecorder:
    """Records the thread of every connection the store's pool hands out."""

    def __init__(self, store: Any) -> None:
        self.loop_thread: int | None = None
        self.on_loop: list[str] = []
        self.calls = 0
        pool = store.pool
        checkout: Callable[..., Any] = pool.connection

        def connection(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if threading.get_ident() == self.loop_thread:
                self.on_loop.append(_caller())
            return checkout(*args, **kwargs)

        pool.connection = connection  # an instance attribute: this pool only


def _caller() -> str:
    import traceback

    frames = [f for f in traceback.extract_stack()[:-2] if "/nbdurable/" in f.filename]
    return " <- ".join(f"{f.name}:{f.lineno}" for f in reversed(frames[-4:]))


def approval_agent(ran: list[str]) -> Agent:
    @nd.tool
    async def look(path: str) -> str:
        """Look at a path."""
        ran.append(f"look {path}")
        return f"{path}: 3 files"

    @nd.tool(needs_approval=True)
    def drop(path: str) -> str:
        """Drop a path."""
        ran.append(f"drop {path}")
        return f"dropped {path}"

    return Agent(
        "janitor",
        nd.ScriptedModel(
            [nd.Turn.call("look", path="/tmp"), nd.Turn.call("drop", path="/tmp"), "done"]
        ),
        [look, drop],
        version="1",
    )


async def test_no_store_call_runs_on_the_loop_thread(
    slow_pg: tuple[str, LatencyProxy],
) -> None:
    url, _ = slow_pg
    store = open_store(url)
    recorder = ThreadRecorder(store)
    recorder.loop_thread = threading.get_ident()
    ran: list[str] = []
    try:
        async with await DurableRuntime.open(
            store=store,
            agents=[approval_agent(ran)],
            approval_signer=nd.ApprovalSigner(SECRET),
            poll_interval=0.2,
        ) as rt:
            run = await rt.submit("janitor", "Clean up /tmp.")
            await run.wait("waiting_approval", timeout=60)
            # The synchronous reads a notebook makes without await, on the loop.
            assert run.status == "waiting_approval"
            assert run.record().state == "waiting_approval"
            assert run.run_id in [r.run_id for r in rt.list_runs("waiting_approval")]
            [request] = await run.pending_approvals()
            await run.approve(request.approval_id)
            record = await run.wait("completed", timeout=60)
            result = await run.result()
            assert run.status == "completed"
            assert run.record().result_text == "done"
            assert {r.run_id: r.state for r in rt.list_runs()}[run.run_id] == "completed"
        assert record.state == "completed"
        assert result.text == "done"
        assert ran == ["look /tmp", "drop /tmp"]
        assert recorder.calls > 10  # the run went through the recorded pool
        assert recorder.on_loop == [], "store calls on the loop thread:\n" + "\n".join(
            sorted(set(recorder.on_loop))
        )
    finally:
        store.close()


@pytest.mark.serial  # a lease against a lock: the machine's load must not lapse it
async def test_a_lease_is_renewed_while_another_store_call_waits_on_a_lock(
    slow_pg: tuple[str, LatencyProxy], shared_database: str
) -> None:
    """A store call stuck 4.5 s on a row lock does not stop another run's 3 s lease renewals.

    The stuck call is a fenced write (it reads the run's fence ``FOR SHARE``);
    a write that rewrites a run record would hold the runtime's advisory lock
    while it waits, and every renewal would wait behind it in the store.
    """
    url, _ = slow_pg
    store = open_store(url)
    lease_ms = 3_000  # renewed every second; a renewal costs several round trips
    started = asyncio.Event()

    @nd.tool
    async def slow(seconds: float) -> str:
        """Take a while."""
        started.set()
        await asyncio.sleep(seconds)
        return "slept"

    worker = Agent(
        "worker",
        nd.ScriptedModel([nd.Turn.call("slow", seconds=6.0), "done"]),
        [slow],
        version="1",
    )
    lapses: list[tuple[float, int]] = []
    watching = threading.Event()

    def watch(run_id: str) -> None:
        # Reads the lease directly (no proxy) ten times a second while the tool runs.
        with psycopg.connect(shared_database, autocommit=True) as conn:
            while watching.is_set():
                row = conn.execute(
                    "SELECT (record::jsonb->>'lease_expires_at')::bigint, state FROM "
                    + _rt_runs(conn)
                    + " WHERE run_id = %s",
                    (run_id,),
                ).fetchone()
                now_ms = int(time.time() * 1000)
                running = row is not None and row[1] == "running" and row[0] is not None
                if running and row[0] <= now_ms:
                    lapses.append((time.monotonic(), now_ms - row[0]))
                time.sleep(0.1)

    try:
        # The parked run is parked by another process, straight to the database.
        parked = f"parked-{uuid.uuid4().hex[:8]}"
        await remote_write(shared_database, f"park:{parked}")
        async with await DurableRuntime.open(
            store=store, agents=[worker], lease_ms=lease_ms, poll_interval=0.2
        ) as rt:
            other = await rt.get_run(parked)
            run = await rt.submit("worker", "Work.")
            await asyncio.wait_for(started.wait(), 60)
            watching.set()
            watcher = threading.Thread(target=watch, args=(run.run_id,), daemon=True)
            watcher.start()
            # Another connection holds the parked run's row: a fenced event append
            # to it (what a run's event writer does) waits 4.5 s for the row.
            parked_fence = (await offload(other.record)).fence
            note = NewEvent(type="note", created_at=int(time.time() * 1000), payload={})
            with psycopg.connect(shared_database) as locker:
                locker.execute(
                    "SELECT 1 FROM " + _rt_runs(locker) + " WHERE run_id = %s FOR UPDATE",
                    (other.run_id,),
                )
                release = threading.Timer(4.5, locker.commit)
                release.start()
                began = time.monotonic()
                await offload(store.append_events, other.run_id, [note], fence=parked_fence)
                waited = time.monotonic() - began
                release.join()
            record = await run.wait("completed", timeout=60)
            watching.clear()
            watcher.join(timeout=10)
        assert waited >= 4.0  # longer than the lease: held on the loop, it would lapse
        assert record.state == "completed"
        assert record.fence == 1  # nobody took it over
        assert lapses == [], f"the lease lapsed while a store call waited: {lapses[:3]}"
    finally:
        watching.clear()
        store.close()


async def remote_write(database: str, *actions: str) -> None:
    """Run ``support/remote_writer.py`` (another process, straight to the database)."""
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WRITER),
        database,
        *actions,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(writer.communicate(), 120)
    assert writer.returncode == 0, err.decode()
    assert out.decode().strip() == "done"


async def test_a_change_made_by_another_process_shows_in_sync_reads(
    slow_pg: tuple[str, LatencyProxy], shared_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process parks a run, then cancels it and parks another: sync reads follow.

    ``status``, ``record()``, ``list_runs()`` and a graph's and a task's reads
    stay on the loop's thread without a store call (the runtime's mirror of the
    records: loaded when it opens, then refreshed off the loop when PostgreSQL
    notifies another process's change).
    """
    monkeypatch.setattr(record_mirror, "RESYNC_SECONDS", 1.0)
    url, _ = slow_pg
    parked, later, graph_id, task_id = (f"remote-{uuid.uuid4().hex[:8]}" for _ in range(4))
    await remote_write(shared_database, f"park:{parked}", f"graph:{graph_id}", f"task:{task_id}")
    store = open_store(url)
    recorder = ThreadRecorder(store)
    recorder.loop_thread = threading.get_ident()
    try:
        async with await DurableRuntime.open(store=store, poll_interval=0.2) as rt:
            # Loaded at open: known without a read on the loop.
            assert {r.run_id: r.state for r in rt.list_runs()}[parked] == "waiting_approval"
            run = await rt.get_run(parked)
            assert run.status == "waiting_approval"
            graph = rt.graph(graph_id)
            assert graph.status == "completed"
            assert [r.node_id for r in graph.records()] == ["only"]
            task = await rt.get_run(task_id)
            assert isinstance(task, TaskRun)
            assert task.state() == {"n": 2}
            assert task.children() == []
            calls_before = recorder.calls
            await remote_write(shared_database, f"cancel:{parked}", f"park:{later}")
            # The writer has exited: its changes are committed and were notified.
            began = time.monotonic()
            # The parked run shows once the notification of its last change was read
            # (a read between the writer's commits shows it on its way there first).
            while run.status != "cancelled" or later not in {
                r.run_id for r in rt.list_runs("waiting_approval")
            }:
                assert time.monotonic() - began < 30, (run.status, rt.list_runs())
                await asyncio.sleep(0.05)
            assert run.record().state == "cancelled"
            # A change that sends no notification (a worker of an older release
            # finishing a run) shows once the unfinished runs are read again.
            later_run = await rt.get_run(later)
            assert later_run.status == "waiting_approval"
            with psycopg.connect(shared_database, autocommit=True) as conn:
                conn.execute(
                    "UPDATE "
                    + _rt_runs(conn)
                    + " SET state = 'failed', record = jsonb_set(record::jsonb, '{state}',"
                    " '\"failed\"')::text WHERE run_id = %s",
                    (later,),
                )
            began = time.monotonic()
            while later_run.status != "failed":
                assert time.monotonic() - began < 30, later_run.record()
                await asyncio.sleep(0.05)
            assert recorder.calls > calls_before  # the mirror read them, off the loop
        assert recorder.on_loop == [], "store calls on the loop thread:\n" + "\n".join(
            sorted(set(recorder.on_loop))
        )
    finally:
        store.close()


def _rt_runs(conn: Any) -> str:
    row = conn.execute(
        "SELECT table_schema FROM information_schema.tables WHERE table_name = 'rt_runs'"
    ).fetchone()
    assert row is not None
    return f'"{row[0]}".rt_runs'
