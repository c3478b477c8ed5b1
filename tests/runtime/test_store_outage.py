"""The store goes away under running runs: a restarted PostgreSQL, a SQLite write lock held
past the busy timeout. Store failures are retried (``store_retry_ms``), never recorded as a
run's failure; past the budget the runtime stops (``on_fatal_error`` once) and leaves its
runs for another worker. Leases are judged by PostgreSQL's clock, not each host's."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.pg_restart_harness import restart_torture
from support.pgserver import PgServer, find_pg_bin, start_server
from support.runtime_harness import check_histories
from support.sqlite_locker import hold_write_lock

import nbdurable as nd
from nbdurable.durable._transient import StoreUnavailableError
from nbdurable.runtime import Agent, DurableRuntime

from .conftest import eventually


@pytest.fixture(scope="module")
def own_pg() -> Iterator[PgServer]:
    """A PostgreSQL server of this module's own: the tests restart and stop it."""
    if find_pg_bin() is None:
        pytest.fail("PostgreSQL is not installed (bash .ci/run installs it)", pytrace=False)
    server = start_server()
    yield server
    server.stop()


def _database(server: PgServer) -> str:
    name = f"t_{uuid.uuid4().hex}"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"postgresql://postgres@127.0.0.1:{server.port}/{name}"


def _answers(store: Any) -> bool:
    try:
        store.rt_list()
    except Exception:
        return False
    return True


@dataclass
class Recorder:
    """Collects what the runtime logs."""

    lines: list[str]

    def error(self, msg: str, *args: object, **kwargs: object) -> None:
        self.lines.append(msg % args)

    def warning(self, msg: str, *args: object, **kwargs: object) -> None:
        self.lines.append(msg % args)


class Trigger:
    """A tool that does something to the store's surroundings the first time it runs."""

    def __init__(self, action: Any) -> None:
        self.action = action
        self.calls = 0
        self.agent = Agent(
            "outage",
            nd.ScriptedModel([nd.Turn.call("step", n=1), "done"]),
            [self._tool()],
            version="1",
            tool_recovery={"step": "safe"},
        )

    def _tool(self) -> Any:
        @nd.tool
        async def step(n: int) -> str:
            """Do a step."""
            self.calls += 1
            if self.calls == 1:
                await asyncio.to_thread(self.action)
            return f"step {n} done"

        return step


# -- PostgreSQL restarted under three worker processes -----------------------------------


async def test_three_workers_postgres_restarted_twice_every_run_completes_once(
    own_pg: PgServer, tmp_path: Path
) -> None:
    """Three `nbdurable worker` processes, 20 runs, `pg_ctl restart -m fast` twice while runs
    are in flight: every run completes with its exact history, no tool call runs twice,
    none is left running, and the workers ride it out (exit 0 on SIGTERM)."""
    url = _database(own_pg)
    log = tmp_path / "executions.log"
    report = await restart_torture(
        own_pg, url, log, runs=20, restarts=2, worker_args=("--store-retry-ms", "60000")
    )
    assert report.restarts == 2
    assert dict(report.states) == {"completed": 20}, report.summary()
    assert report.doubled == 0, report.summary()
    assert len(report.executions) == 20 * 3  # each run: two safe probes and one charge
    assert report.worker_codes == [0, 0, 0], report.worker_logs
    store = nd.open_store(url)
    run_ids = [r.run_id for r in store.rt_list()]  # type: ignore[attr-defined]
    store.close()
    check_histories(url, run_ids)


@pytest.mark.spec("S003-06")
async def test_postgres_gone_past_the_budget_stops_the_runtime_once_and_leaves_the_run(
    own_pg: PgServer,
) -> None:
    """The server stays down longer than store_retry_ms while a tool runs:
    on_fatal_error is called once, the run is not failed (it stays running under its
    lapsing lease), the runtime claims nothing more, and a new runtime finishes the run."""
    url = _database(own_pg)
    stopped = asyncio.Event()

    trigger = Trigger(own_pg.stop_server)  # down until the test starts it again
    fatal: list[BaseException] = []
    store = nd.open_store(url)
    try:
        rt = await DurableRuntime.open(
            store=store,
            agents=[trigger.agent],
            store_retry_ms=1_500,
            lease_ms=2_000,
            on_fatal_error=fatal.append,
        )
        run = await rt.submit("outage", "go")
        began = time.monotonic()
        await eventually(lambda: len(fatal) == 1, timeout=20)
        waited = time.monotonic() - began
        stopped.set()
        assert isinstance(fatal[0], StoreUnavailableError)
        assert 1.5 <= waited < 15, waited
        own_pg.start_server()
        await eventually(lambda: _answers(store), timeout=20)
        assert len(fatal) == 1
        record = run.record()
        assert (
            record.state in ("running", "pending", "completed") and record.error is None
        )  # left as it was
        second = await rt.submit("outage", "after")
        await asyncio.sleep(0.5)
        assert second.record().state == "pending"  # the stopped runtime takes no work
        await rt.close()
        assert run.record().state == "running"
        async with await DurableRuntime.open(store=store, agents=[trigger.agent], lease_ms=2_000):
            assert await asyncio.wait_for(run.result(), 20) is not None
            await asyncio.wait_for(second.result(), 20)
        assert run.record().state == "completed"
        assert len(fatal) == 1
    finally:
        if not stopped.is_set():
            own_pg.start_server()
        store.close()


# -- SQLite busy past its busy_timeout ---------------------------------------------------


async def test_sqlite_write_lock_held_past_busy_timeout_is_retried_not_a_failure(
    tmp_path: Path,
) -> None:
    """Another process holds the write lock 1.5 s, past the store's 0.1 s busy_timeout,
    while the run records its tool call: the writes are retried and the run completes."""
    path = tmp_path / "runs.db"
    holders = []
    trigger = Trigger(lambda: holders.append(hold_write_lock(path, 1.5)))
    lines: list[str] = []
    store = nd.SqliteSessionStore(path, busy_timeout=0.1)
    try:
        deps = nd.Deps(logger=Recorder(lines))
        async with await DurableRuntime.open(
            store=store, agents=[trigger.agent], deps=deps, store_retry_ms=30_000
        ) as rt:
            run = await rt.submit("outage", "go")
            assert (await asyncio.wait_for(run.result(), 30)).text == "done"
        record = run.record()
        assert record.state == "completed" and record.error is None
        assert trigger.calls == 1
        assert any("database is locked" in line and "retrying" in line for line in lines), lines
        assert any("the store is back" in line for line in lines), lines
    finally:
        for holder in holders:
            holder.wait(timeout=10)
        store.close()


async def test_sqlite_lock_held_past_the_budget_is_fatal_and_the_run_is_not_failed(
    tmp_path: Path,
) -> None:
    """The write lock is held 3 s, the budget is 0.3 s: on_fatal_error once, the run is not
    failed and a runtime opened later completes it.

    It stays ``running`` when its own store call gave up (no write), or is ``pending``
    when that call got through once the lock was gone and close() handed the leg back,
    or ``completed`` when the lock came after its last write (the lock's process starts
    late on a loaded machine) and the scheduler's claim was the call that gave up.
    """
    path = tmp_path / "runs.db"
    holders = []
    trigger = Trigger(lambda: holders.append(hold_write_lock(path, 3.0)))
    fatal: list[BaseException] = []
    store = nd.SqliteSessionStore(path, busy_timeout=0.1)
    try:
        rt = await DurableRuntime.open(
            store=store,
            agents=[trigger.agent],
            store_retry_ms=300,
            lease_ms=1_000,
            on_fatal_error=fatal.append,
        )
        run = await rt.submit("outage", "go")
        await eventually(lambda: len(fatal) == 1, timeout=10)
        assert isinstance(fatal[0], StoreUnavailableError)
        assert "database is locked" in str(fatal[0])
        holders[0].wait(timeout=10)
        await rt.close()
        record = run.record()
        assert record.state in ("running", "pending", "completed") and record.error is None
        assert len(fatal) == 1
        async with await DurableRuntime.open(store=store, agents=[trigger.agent], lease_ms=1_000):
            assert (await asyncio.wait_for(run.result(), 20)).text == "done"
    finally:
        for holder in holders:
            holder.wait(timeout=10)
        store.close()


async def test_a_submission_whose_commit_was_not_acknowledged_returns_its_run(
    tmp_path: Path,
) -> None:
    """A write may commit and still fail on the way back (the connection broke after
    COMMIT): the submission's retry finds its own run and returns it, not a conflict."""
    path = tmp_path / "runs.db"

    class LosesTheAnswer(nd.SqliteSessionStore):  # type: ignore[misc]
        """The real store, whose first insert commits and then reports SQLITE_BUSY."""

        lost = False

        def rt_insert(self, run: Any, **kwargs: Any) -> Any:
            stored = super().rt_insert(run, **kwargs)
            if not self.lost:
                self.lost = True
                holder = hold_write_lock(path, 0.5)
                try:
                    super().rt_insert(run.model_copy(update={"run_id": "probe"}), **kwargs)
                finally:
                    holder.wait(timeout=10)
            return stored

    store = LosesTheAnswer(path, busy_timeout=0.05)
    try:
        agent = Trigger(lambda: None).agent
        async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
            run = await rt.submit("outage", "go", run_id="run-1")
            assert store.lost
            assert (await asyncio.wait_for(run.result(), 10)).text == "done"
        assert [r.run_id for r in store.rt_list()] == ["run-1"]
    finally:
        store.close()


def test_store_retry_ms_must_be_a_non_negative_integer() -> None:
    store = nd.InMemorySessionStore()
    for bad in (-1, 2.5, True, "60000"):
        with pytest.raises(nd.ConfigurationError, match="store_retry_ms"):
            DurableRuntime(store=store, store_retry_ms=bad)  # type: ignore[arg-type]


# -- leases by the database's clock ------------------------------------------------------


@dataclass
class SkewedClock:
    """The host clock, ``offset_ms`` off."""

    offset_ms: int

    def now(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms


@pytest.mark.parametrize(("holder_skew", "thief_skew"), [(0, 3_600_000), (-3_600_000, 0)])
async def test_a_host_clock_an_hour_off_does_not_steal_or_lose_a_live_lease_on_postgres(
    pg_database: str, holder_skew: int, thief_skew: int
) -> None:
    """Two runtimes on one PostgreSQL store, one host clock an hour off (ahead: it would
    see every lease as expired; behind: the leases it set would look expired to the
    other). Leases are set and judged by the database's clock: no steal, the tool runs once."""
    gate = asyncio.Event()
    started: list[str] = []

    @nd.tool
    async def hold(n: int) -> str:
        """Hold on."""
        started.append("x")
        await gate.wait()
        return "held"

    agent = Agent(
        "holder",
        nd.ScriptedModel([nd.Turn.call("hold", n=1), "done"]),
        [hold],
        version="1",
        tool_recovery={"hold": "safe"},
    )
    first_store = nd.open_store(pg_database)
    second_store = nd.open_store(pg_database)
    try:
        holder = await DurableRuntime.open(
            store=first_store,
            agents=[agent],
            lease_ms=3_000,
            owner_id="holder",
            deps=nd.Deps(clock=SkewedClock(holder_skew)),
        )
        run = await holder.submit("holder", "go")
        await eventually(lambda: len(started) == 1, timeout=10)
        thief = await DurableRuntime.open(
            store=second_store,
            agents=[agent],
            lease_ms=3_000,
            owner_id="thief",
            deps=nd.Deps(clock=SkewedClock(thief_skew)),
        )
        await asyncio.sleep(2.5)  # many claims by the thief, a renewal by the holder
        record = run.record()
        assert record.lease_owner is not None
        assert (record.lease_owner.split("@")[0], record.fence) == ("holder", 1)
        real_now = time.time_ns() // 1_000_000
        assert record.lease_expires_at is not None
        assert real_now < record.lease_expires_at <= real_now + 3_000 + 1_000
        assert len(started) == 1
        gate.set()
        assert (await asyncio.wait_for(run.result(), 10)).text == "done"
        assert len(started) == 1 and run.record().fence == 1
        await thief.close()
        await holder.close()
    finally:
        first_store.close()
        second_store.close()


def test_postgres_sets_and_judges_leases_by_its_own_clock(pg_database: str) -> None:
    """rt_claim and rt_renew on PostgreSQL: the lease runs from the database's clock, whatever
    ``now`` the caller passes; a caller an hour ahead does not see a live lease as expired."""
    from nbdurable.runs import RuntimeRun

    store = nd.open_store(pg_database)
    try:
        hour = 3_600_000
        real = time.time_ns() // 1_000_000
        run = RuntimeRun(
            run_id="r1",
            agent_id="a",
            agent_version="1",
            session_id="s",
            prompt='"hi"',
            state="pending",
            created_at=real,
            updated_at=real,
        )
        store.rt_insert(run, enqueue=False, max_pending=10)  # type: ignore[attr-defined]
        claimed = store.rt_claim("one", real - hour, 5_000, [("a", "1")])  # type: ignore[attr-defined]
        assert claimed is not None and claimed.lease_expires_at is not None
        after = time.time_ns() // 1_000_000
        assert real + 5_000 - 1_000 <= claimed.lease_expires_at <= after + 5_000 + 1_000
        assert store.rt_claim("two", real + hour, 5_000, [("a", "1")]) is None  # type: ignore[attr-defined]
        assert store.rt_renew("r1", "one", 1, real - hour, lease_ms=60_000)  # type: ignore[attr-defined]
        renewed = store.rt_get("r1").lease_expires_at  # type: ignore[attr-defined]
        assert after + 60_000 - 1_000 <= renewed <= time.time_ns() // 1_000_000 + 60_000 + 1_000
    finally:
        store.close()
