"""A process paused inside a PostgreSQL transaction holds its locks for a bounded time.

The runtime's writes (claims, lease renewals) lock their run's row for a few
milliseconds. A worker stopped in the middle of one (SIGSTOP) would hold it
until it was continued: no other worker could take that run over. (Workers on
other runs never wait for it: tests/stores/test_postgres_scaling.py.)
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from support import runtime_agents
from support.paused_in_transaction import start_paused
from support.runtime_harness import executions, worker

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.stores.postgres import PostgresSessionStore


async def test_a_worker_paused_in_a_transaction_does_not_stop_the_others(
    tmp_path: Path, pg_database: str
) -> None:
    """SIGSTOP holding the run's row: the server ends that session, another worker runs it."""
    log = tmp_path / "executions.log"
    store = nd.open_store(pg_database)
    client = DurableRuntime(store=store, agents=runtime_agents.agents)
    run = await client.submit("single", "job")
    other: subprocess.Popen[str] | None = None
    holder = start_paused(pg_database, 1.5)
    try:
        paused_at = time.monotonic()
        other = worker(pg_database, log, "--exit-when-idle", lease_ms=300)
        _out, err = other.communicate(timeout=60)
        assert other.returncode == 0, err
        assert time.monotonic() - paused_at >= 1.4  # it did wait for the server to end the session
        assert run.status == "completed"
        assert len(executions(log)) == 1
        holder.send_signal(signal.SIGCONT)
        out, err = holder.communicate(timeout=30)
        assert holder.returncode == 0, err
        assert out.splitlines() == [
            "woke to IdleInTransactionSessionTimeout transient=True",
            "store works: 1 run(s)",
        ]
    finally:
        for proc in (holder, other):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        store.close()


def test_store_sessions_get_an_idle_in_transaction_timeout(pg_database: str) -> None:
    """Ten seconds unless the session has one already (the DSN's options) or None is asked for."""
    show = "SHOW idle_in_transaction_session_timeout"

    def setting(store: PostgresSessionStore) -> str:
        with store.pool.connection() as conn:
            found = conn.execute(show).fetchone()
        store.close()
        assert found is not None
        return str(found[0])

    assert setting(PostgresSessionStore(pg_database)) == "10s"
    assert setting(PostgresSessionStore(pg_database, idle_in_transaction_timeout=2.5)) == "2500ms"
    assert setting(PostgresSessionStore(pg_database, idle_in_transaction_timeout=None)) == "0"
    chosen = f"{pg_database}?options=-c%20idle_in_transaction_session_timeout%3D7000"
    assert setting(PostgresSessionStore(chosen)) == "7s"
    configured: list[object] = []
    store = PostgresSessionStore(pg_database, pool_kwargs={"configure": configured.append})
    assert setting(store) == "10s" and configured  # the caller's configure runs too


def test_a_non_positive_idle_in_transaction_timeout_is_refused(pg_database: str) -> None:
    with pytest.raises(nd.ConfigurationError, match="must be positive"):
        PostgresSessionStore(pg_database, idle_in_transaction_timeout=0)
