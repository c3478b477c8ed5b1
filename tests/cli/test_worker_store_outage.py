"""`nbdurable worker --store-retry-ms`: a worker rides out a short outage and exits (status 2,
one line on stderr) when its PostgreSQL store stays away longer, leaving its run for another."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import psycopg
import pytest
from support.pgserver import find_pg_bin, start_server
from support.runtime_harness import worker
from support.waiting import wait_until

import nbdurable as nd
from nbdurable.runtime import DurableRuntime


async def test_worker_exits_once_the_store_stays_unavailable_past_store_retry_ms(
    tmp_path: Path,
) -> None:
    if find_pg_bin() is None:
        pytest.fail("PostgreSQL is not installed (bash .ci/run installs it)", pytrace=False)
    from support import runtime_agents

    server = start_server()
    try:
        name = f"t_{uuid.uuid4().hex}"
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = f"postgresql://postgres@127.0.0.1:{server.port}/{name}"
        store = nd.open_store(url)
        client = DurableRuntime(store=store, agents=runtime_agents.agents)  # submits only
        run = await client.submit("sleeper", "nap")
        proc = worker(url, tmp_path / "log", "--store-retry-ms", "1000", lease_ms=30_000)
        wait_until(lambda: run.record().state == "running", timeout=30)
        server.stop_server()
        began = time.monotonic()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, err
        assert time.monotonic() - began < 30
        last = err.strip().splitlines()[-1]
        assert last.startswith("nbdurable: the store stayed unavailable for "), err
        server.start_server()
        wait_until(lambda: store.rt_get(run.run_id) is not None, timeout=30)  # type: ignore[attr-defined]
        record = store.rt_get(run.run_id)  # type: ignore[attr-defined]
        assert record.state in ("running", "pending") and record.error is None
        store.close()
    finally:
        server.stop()


def test_worker_help_names_the_store_retry_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from nbdurable.cli import main

    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    out = capsys.readouterr().out
    assert "--store-retry-ms" in out and "60000" in out
