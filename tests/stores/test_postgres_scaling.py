"""Many workers on one PostgreSQL: no schema-wide lock, claims in O(1), wake-ups by NOTIFY.

Issue 39: a run's steps take no advisory lock (the statement log of a real
server says so); a transaction holding one run's row does not stop another
worker's steps on another run; a submission from another process wakes an idle
worker through LISTEN/NOTIFY, not its (here very long) fallback poll; and the
claim's query reads an index, its cost the same with 0 or 10,000 pending runs
of agents the worker does not serve.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support.cluster_agents import STEPS, chain
from support.pgserver import PgServer

import nbdurable as nd
from nbdurable.runs import RuntimeRun
from nbdurable.runtime import DurableRuntime
from nbdurable.stores.postgres import PostgresSessionStore
from nbdurable.stores.postgres._runs_sql import candidate_statement, unnoted_statement

SCHEMA = "nbdurable"


def _unserved(count: int, start: int = 0) -> list[RuntimeRun]:
    """``count`` pending runs of an agent no test runtime serves."""
    now = int(time.time() * 1000)
    return [
        RuntimeRun(
            run_id=f"other-{i}",
            agent_id="other",
            agent_version="1",
            session_id=f"s-other-{i}",
            prompt=json.dumps("x"),
            state="pending",
            created_at=now,
            updated_at=now,
            engine="embedded",
        )
        for i in range(start, start + count)
    ]


def _db_name(url: str) -> str:
    return url.rsplit("/", 1)[1]


@pytest.fixture
def logged(pg_server: PgServer, pg_database: str) -> Iterator[tuple[str, PgServer]]:
    """``pg_database`` with every statement of its new sessions in the server log."""
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {_db_name(pg_database)} SET log_statement = 'all'")
    yield pg_database, pg_server
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {_db_name(pg_database)} RESET log_statement")


async def test_a_runs_steps_take_no_advisory_lock(logged: tuple[str, PgServer]) -> None:
    """A 21-step embedded run, every statement logged: none takes an advisory lock (was 32)."""
    url, server = logged
    nd.open_store(url).close()  # the schema migrates first (its migration lock is not a step's)
    log = server.data_dir / "server.log"
    start = log.stat().st_size
    store = nd.open_store(url)
    try:
        async with DurableRuntime(store=store, agents=[chain]) as runtime:
            run = await runtime.submit("chain", "go")
            record = await run.wait("completed", "failed", timeout=60)
            assert record.state == "completed"
    finally:
        store.close()
    text = log.read_bytes()[start:].decode(errors="replace")
    statements = [line for line in text.splitlines() if "statement:" in line or "execute " in line]
    assert sum("rt_journal" in line for line in statements) >= STEPS  # the log caught the run
    assert [line for line in statements if "advisory" in line.lower()] == []


async def test_a_row_held_by_one_worker_does_not_stop_another_workers_run(
    pg_database: str,
) -> None:
    """A transaction left open on run A's row (a paused claim or renewal): run B runs all
    its steps meanwhile; A waits only for its own row, then runs too."""
    store = PostgresSessionStore(pg_database)
    client = DurableRuntime(store=store, agents=[chain])  # submits only
    first = await client.submit("chain", "a")
    holder = psycopg.connect(pg_database)  # not autocommit: the transaction stays open
    try:
        holder.execute(
            f"SELECT run_id FROM {SCHEMA}.rt_runs WHERE run_id = %s FOR UPDATE", (first.run_id,)
        ).fetchall()
        second = await client.submit("chain", "b")
        worker_store = PostgresSessionStore(pg_database)
        try:
            async with DurableRuntime(store=worker_store, agents=[chain], poll_interval=0.02):
                began = time.monotonic()
                done = await second.wait("completed", "failed", timeout=30)
                assert done.state == "completed" and done.operations >= STEPS
                assert time.monotonic() - began < 10
                held = store.rt_get(first.run_id)
                assert held is not None and held.state == "pending"  # skipped, not waited for
                holder.rollback()  # the row is free: the worker takes A at its next claim
                assert (await first.wait("completed", timeout=30)).state == "completed"
        finally:
            worker_store.close()
    finally:
        holder.close()
        store.close()


async def test_a_submission_wakes_an_idle_worker_by_notify(pg_database: str) -> None:
    """The worker's fallback poll is a minute: another process's submission starts it well before."""
    worker_store = PostgresSessionStore(pg_database)
    client_store = PostgresSessionStore(pg_database)
    client = DurableRuntime(store=client_store, agents=[chain])  # its engine never starts
    try:
        async with DurableRuntime(
            store=worker_store, agents=[chain], idle_poll_interval=60.0, poll_interval=0.02
        ):
            deadline = time.monotonic() + 10
            while not worker_store.notifies_work():
                assert time.monotonic() < deadline, "the worker never listened"
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # the worker is idle now, asleep for a minute
            began = time.monotonic()
            run = await client.submit("chain", "wake up")
            while True:
                record = client_store.rt_get(run.run_id)
                assert record is not None
                if record.state != "pending":
                    break
                # well inside the minute the worker would otherwise sleep (a timing bound
                # loose enough for a loaded CI: 1 s was missed there once)
                assert time.monotonic() - began < 15.0, "the worker was not woken"
                await asyncio.sleep(0.01)
            assert record.lease_owner is not None
            assert (await run.wait("completed", timeout=30)).state == "completed"
    finally:
        client_store.close()
        worker_store.close()


def _explain(url: str, statement: str, params: dict[str, Any]) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params
        ).fetchone()
        conn.rollback()  # the FOR UPDATE locks go
    assert found is not None
    plan: dict[str, Any] = found[0][0]
    return plan


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _blocks(plan: dict[str, Any]) -> int:
    top = plan["Plan"]
    return int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))


def test_the_claim_query_reads_an_index_and_is_flat_in_unserved_pending_runs(
    pg_database: str,
) -> None:
    store = PostgresSessionStore(pg_database)
    try:
        candidate = candidate_statement(SCHEMA, 1)
        now = int(time.time() * 1000) + 1000
        claim = {"a0": "chain", "v0": "1", "kinds": ["agent"], "now": now, "skip": []}
        store.rt_insert_many(_unserved(10), max_pending=100_000)
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f"ANALYZE {SCHEMA}.rt_runs")
        few = _explain(pg_database, candidate, claim)
        store.rt_insert_many(_unserved(10_000, start=10), max_pending=100_000)
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f"ANALYZE {SCHEMA}.rt_runs")
        many = _explain(pg_database, candidate, claim)
        indexes = {node.get("Index Name") for node in _nodes(many["Plan"])}
        assert "rt_runs_claim" in indexes, json.dumps(many["Plan"])[:3000]
        assert not any(
            node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "rt_runs"
            for node in _nodes(many["Plan"])
        )
        assert _blocks(many) <= _blocks(few) + 8, (_blocks(few), _blocks(many))
        assert many["Execution Time"] < 20  # ms: 10,000 unserved runs are not read

        # An idle claim gives unserved runs their waiting reason, a batch per poll,
        # each once: then they leave the unnoted index, and a poll reads none.
        served = [("chain", "1")]
        for _ in range(100):
            assert store.rt_claim("w", now, 30_000, served) is None
            unnoted = _explain(pg_database, unnoted_statement(SCHEMA, 1), claim)
            if unnoted["Plan"].get("Actual Rows", 1) == 0:
                break
        else:
            raise AssertionError("the unserved runs were never all noted")
        assert "rt_runs_unnoted" in {n.get("Index Name") for n in _nodes(unnoted["Plan"])}
        # The noted runs' index entries stay until a vacuum (about 40 pages for
        # 10,000): far from the table's ~1,300 pages a poll read before.
        assert _blocks(unnoted) < 100 and unnoted["Execution Time"] < 20
        waiting = store.rt_get("other-5")
        assert (
            waiting is not None and waiting.waiting_reason == "waits for a worker serving other v1"
        )
    finally:
        store.close()


def test_a_store_url_bounds_the_pool(pg_database: str) -> None:
    """``?pool_max=N``: what a worker started from a URL holds at most (plus its listener)."""
    store = nd.open_store(f"{pg_database}?pool_max=2")
    try:
        assert isinstance(store, PostgresSessionStore)
        assert (store.pool.min_size, store.pool.max_size) == (1, 2)
    finally:
        store.close()
    with pytest.raises(nd.ConfigurationError, match="pool_max must be a positive integer"):
        nd.open_store(f"{pg_database}?pool_max=0")
