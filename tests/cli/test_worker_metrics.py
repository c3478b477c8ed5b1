"""`nbdurable worker --metrics-port`: /metrics scraped during a real run, /healthz, /readyz
following the store down and back, and JSON log lines of a run's lifecycle."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from support.pgserver import find_pg_bin, start_server
from support.runtime_harness import worker
from support.scraping import get, metrics_base, samples, scrape, value
from support.waiting import wait_until

import nbdurable as nd
from nbdurable.runtime import DurableRuntime


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return err


async def test_scraped_metrics_follow_a_real_run_and_logs_are_json(tmp_path: Path) -> None:
    from support import runtime_agents

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    client = DurableRuntime(store=nd.open_store(url), agents=runtime_agents.agents)
    sleeper = await client.submit("sleeper", "nap")
    # leases are renewed every third of lease_ms: 1 s, within the sleeper's 1.5 s tool
    proc = worker(
        url, tmp_path / "log", "--metrics-port", "0", "--log-format", "json", lease_ms=3_000
    )
    try:
        base = metrics_base(proc)
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/readyz") == (200, "ok\n")
        wait_until(lambda: sleeper.record().state == "running", timeout=30)
        assert get(f"{base}/metrics")[0] == 200
        # the counter follows the claim's write (made on a store thread): scrape until it shows
        started = ("nbdurable_runs_started_total", {"agent": "sleeper"})
        wait_until(lambda: value(scrape(base), started[0], **started[1]) == 1, timeout=30)
        during = scrape(base)
        assert value(during, "nbdurable_runs_started_total", agent="sleeper") == 1
        assert value(during, "nbdurable_store_runs", state="running") == 1
        assert value(during, "nbdurable_store_up") == 1
        single = await client.submit("single", "probe", session_id="other")
        wait_until(
            lambda: sleeper.record().state == "completed" and single.record().state == "completed",
            timeout=60,
        )
        finished = "nbdurable_runs_finished_total"
        wait_until(lambda: value(scrape(base), finished, state="completed") == 2, timeout=30)
        after = scrape(base)
        assert value(after, "nbdurable_runs_finished_total", agent="sleeper", state="completed")
        assert value(after, "nbdurable_runs_finished_total", state="completed") == 2
        assert value(after, "nbdurable_tool_call_seconds_count", tool="slow_step") == 1
        assert value(after, "nbdurable_tool_call_seconds_sum", tool="slow_step") >= 1.5
        assert value(after, "nbdurable_model_call_seconds_count", agent="single") == 2
        assert value(after, "nbdurable_step_seconds_count") >= 3
        assert value(after, "nbdurable_store_runs", state="completed") == 2
        assert value(after, "nbdurable_lease_renewals_total") >= 1
        run_ids = {sleeper.run_id, single.run_id}
        assert not any(set(labels.values()) & run_ids for _, labels, _ in after)
    finally:
        err = _stop(proc)
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    mine = [line for line in lines if line.get("run_id") == sleeper.run_id]
    assert {line["event"] for line in mine} >= {"claimed", "finished"}, err
    assert all(line["agent"] == "sleeper" and line["level"] for line in mine)


async def test_readyz_follows_the_postgresql_server_down_and_back(tmp_path: Path) -> None:
    if find_pg_bin() is None:
        pytest.fail("PostgreSQL is not installed (bash .ci/run installs it)", pytrace=False)
    server = start_server()
    proc = None
    try:
        name = f"t_{uuid.uuid4().hex}"
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = f"postgresql://postgres@127.0.0.1:{server.port}/{name}"
        proc = worker(url, tmp_path / "log", "--metrics-port", "0", lease_ms=30_000)
        base = metrics_base(proc)
        wait_until(lambda: get(f"{base}/readyz")[0] == 200, timeout=30)
        server.stop_server()
        wait_until(lambda: get(f"{base}/readyz")[0] == 503, timeout=30)
        status, body = get(f"{base}/readyz")
        assert status == 503
        assert body.startswith("not ready: store"), body
        assert get(f"{base}/healthz")[0] == 200  # the process is up all the same
        server.start_server()
        wait_until(lambda: get(f"{base}/readyz")[0] == 200, timeout=30)
        assert proc.poll() is None
    finally:
        if proc is not None and proc.poll() is None:
            _stop(proc)
        server.stop()


def test_worker_help_names_the_metrics_and_log_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from nbdurable.cli import main

    with pytest.raises(SystemExit):
        main(["worker", "--help"])
    out = capsys.readouterr().out
    for flag in ("--metrics-port", "--metrics-host", "--log-level", "--log-format"):
        assert flag in out


async def test_a_takeover_counts_in_the_metrics_and_writes_a_log_line(tmp_path: Path) -> None:
    from support import runtime_agents

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    client = DurableRuntime(store=nd.open_store(url), agents=runtime_agents.agents)
    run = await client.submit("sleeper", "nap")
    first = worker(url, tmp_path / "log", lease_ms=30_000)
    try:
        wait_until(lambda: run.record().state == "running", timeout=30)
    finally:
        first.kill()  # SIGKILL: its process is gone, its lease still looks held
        first.communicate(timeout=10)
    second = worker(
        url, tmp_path / "log", "--metrics-port", "0", "--log-format", "json", lease_ms=30_000
    )
    try:
        base = metrics_base(second)
        wait_until(lambda: run.record().state == "completed", timeout=60)
        scraped = samples(get(f"{base}/metrics")[1])
        assert value(scraped, "nbdurable_takeovers_total", agent="sleeper") == 1
        assert value(scraped, "nbdurable_takeovers_total", cause="owner_gone") == 1
    finally:
        err = _stop(second)
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    [taken] = [line for line in lines if line.get("event") == "taken_over"]
    assert taken["run_id"] == run.run_id and taken["agent"] == "sleeper", err
    assert taken["previous_owner"] and taken["cause"] == "owner_gone"
