"""`nbdurable worker` told to stop (SIGTERM) while its PostgreSQL server is down: it exits
well within Kubernetes' 30-s grace period, whatever its store retry budget, and leaves what
it could not hand back to lapse (its runs are not failed; another worker continues them)."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from support.pgserver import PgServer, find_pg_bin, start_server
from support.runtime_harness import worker
from support.waiting import wait_until

import nbdurable as nd
from nbdurable.runtime import DurableRuntime

DRAIN_SECONDS = 3.0


@pytest.fixture
def server() -> Iterator[PgServer]:
    """A PostgreSQL server of the test's own: the test stops it."""
    if find_pg_bin() is None:
        pytest.fail("PostgreSQL is not installed (bash .ci/run installs it)", pytrace=False)
    started = start_server()
    yield started
    started.stop()


def _database(server: PgServer) -> str:
    name = f"t_{uuid.uuid4().hex}"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"postgresql://postgres@127.0.0.1:{server.port}/{name}"


async def test_a_worker_stopped_while_postgres_is_down_exits_soon_after_its_drain(
    server: PgServer, tmp_path: Path
) -> None:
    """The server goes away while a tool runs, then SIGTERM: the drain lets the tool finish,
    its result cannot be written, and the worker exits a few seconds after the drain
    (not after its 60-s store retry budget), status 2 with its one line on stderr. Once
    the server is back the run is still `running` under its lapsing lease, not failed."""
    url = _database(server)
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=_agents())  # submits only
    run = await client.submit("sleeper", "nap")
    log = tmp_path / "log"
    proc = worker(url, log, "--drain-seconds", str(DRAIN_SECONDS), lease_ms=30_000)
    try:
        wait_until(lambda: _tool_started(log), timeout=60)
        server.stop_server()
        proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        _, err = proc.communicate(timeout=90)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert took < DRAIN_SECONDS + 12, (took, err)
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert any(line.startswith("nbdurable: the store stayed unavailable") for line in lines), err
    server.start_server()
    wait_until(lambda: store.rt_get(run.run_id) is not None, timeout=30)  # type: ignore[attr-defined]
    record = store.rt_get(run.run_id)  # type: ignore[attr-defined]
    assert record.state == "running" and record.error is None
    store.close()


async def test_a_second_sigterm_while_postgres_is_down_exits_at_once(
    server: PgServer, tmp_path: Path
) -> None:
    """With the default 25-s drain and the server gone, a second SIGTERM ends the drain and
    every store retry at once: the worker exits within seconds, status 2."""
    url = _database(server)
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=_agents())  # submits only
    await client.submit("sleeper", "nap")
    log = tmp_path / "log"
    proc = worker(url, log, lease_ms=30_000)
    try:
        wait_until(lambda: _tool_started(log), timeout=60)
        server.stop_server()
        proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        await asyncio.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=90)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert took < 10, (took, err)
    assert proc.returncode == 2, err
    store.close()


async def test_a_worker_stopped_while_postgres_restarts_hands_its_run_back_and_exits_0(
    server: PgServer, tmp_path: Path
) -> None:
    """The server goes away while a tool runs, SIGTERM, and the server is back a moment
    later, within the drain: the tool's result is written once the server answers, the
    run is handed back `pending` (its next model call held back), its lease cleared, and
    the worker exits 0, stderr quiet about the store."""
    url = _database(server)
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=_agents())  # submits only
    run = await client.submit("sleeper", "nap")
    log = tmp_path / "log"
    proc = worker(url, log, "--drain-seconds", "8", lease_ms=30_000)
    try:
        wait_until(lambda: _tool_started(log), timeout=60)
        server.stop_server()
        proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        await asyncio.sleep(1.0)
        server.start_server()
        _, err = proc.communicate(timeout=90)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert took < 8 + 12, (took, err)
    assert "stayed unavailable" not in err, err
    wait_until(lambda: store.rt_get(run.run_id) is not None, timeout=30)  # type: ignore[attr-defined]
    record = store.rt_get(run.run_id)  # type: ignore[attr-defined]
    assert record.state == "pending" and record.lease_owner is None, record
    assert len(log.read_text().splitlines()) == 1  # the tool ran once
    store.close()


def _tool_started(log: Path) -> bool:
    return log.exists() and log.read_text().startswith("slow ")


def _agents() -> list[nd.Agent]:
    from support import runtime_agents

    return list(runtime_agents.agents)
