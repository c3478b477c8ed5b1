"""``--log-format json`` through a PostgreSQL outage: every line the process writes is JSON.

A worker on a real PostgreSQL server, its store stopped mid-run and started
again, ``/readyz`` asked meanwhile, then SIGTERM: every line of its stdout and
stderr parses as a JSON object (psycopg's pool warnings and asyncio's reports
included), and the exit is clean (no task destroyed while pending, no "Event
loop is closed"). ``--log-level INFO`` is taken in any case.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.pgserver import PgServer, find_pg_bin, start_server
from support.runtime_harness import worker
from support.scraping import get
from support.waiting import wait_until

import nbdurable as nd
from nbdurable.cli._serve import STOP_STORE_SECONDS
from nbdurable.runtime import DurableRuntime

TESTS = Path(__file__).resolve().parents[1]
UNCLEAN = ("Task was destroyed", "Event loop is closed", "never retrieved", "Exception ignored")


@pytest.fixture
def pg() -> Iterator[PgServer]:
    if find_pg_bin() is None:
        pytest.fail("PostgreSQL is not installed (bash .ci/run installs it)", pytrace=False)
    server = start_server()
    try:
        yield server
    finally:
        server.stop()


def _serve(url: str, *extra: str) -> subprocess.Popen[str]:
    """``nbdurable serve`` of the test agents on ``url``, any free port."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    command = [
        sys.executable, "-m", "nbdurable.cli", "serve", "--store", url,
        "--agents", "support.runtime_agents:agents", "--port", "0", *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _database(server: PgServer) -> str:
    name = f"t_{uuid.uuid4().hex}"
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"postgresql://postgres@127.0.0.1:{server.port}/{name}"


async def _submit_sleepers(url: str, count: int) -> list[Any]:
    from support import runtime_agents

    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=runtime_agents.agents)  # submits only
    runs = [await client.submit("sleeper", "nap", session_id=f"s{i}") for i in range(count)]
    return runs


def _first_lines(proc: subprocess.Popen[str], until: str) -> tuple[list[str], str]:
    """stdout's lines up to the one that holds ``until``; the probes' base URL."""
    assert proc.stdout is not None
    lines: list[str] = []
    base = ""
    while not any(until in line for line in lines):
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(proc.communicate(timeout=10))
        lines.append(line)
        found = re.search(r"(http://127\.0\.0\.1:\d+)/metrics", line)
        base = found.group(1) if found else base
    return lines, base


class _Prober:
    """Asks ``/readyz`` over and over on a thread (each answer within the probe's bound)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.stopped = threading.Event()
        self.answers: list[int] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.answers.append(get(f"{self.base}/readyz")[0])
            except OSError:  # the process is going away
                self.answers.append(0)
            time.sleep(0.05)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(15)


def _every_line_json(out: str, err: str) -> list[dict[str, Any]]:
    parsed = []
    for stream, text in (("stdout", out), ("stderr", err)):
        for line in text.splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                raise AssertionError(f"a {stream} line is not JSON: {line!r}\n{err}") from None
            assert isinstance(value, dict), line
            assert {"time", "level", "logger", "message"} <= value.keys(), line
            parsed.append(value)
    for needle in UNCLEAN:
        assert needle not in out + err, f"{needle!r} in\n{err}"
    return parsed


async def test_a_worker_through_an_outage_writes_only_json_and_exits_cleanly(
    pg: PgServer, tmp_path: Path
) -> None:
    url = _database(pg)
    runs = await _submit_sleepers(url, 3)
    proc = worker(
        url,
        tmp_path / "log",
        "--log-format", "json", "--log-level", "INFO", "--metrics-port", "0",
        lease_ms=30_000,
    )  # fmt: skip
    try:
        lines, base = _first_lines(proc, "serving")
        wait_until(lambda: any(run.record().state == "running" for run in runs), timeout=30)
        prober = _Prober(base)
        pg.stop_server()
        await asyncio.sleep(3)
        pg.start_server()
        wait_until(lambda: all(run.record().state == "completed" for run in runs), timeout=90)
        prober.stop()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    logged = _every_line_json("".join(lines) + out, err)
    loggers = {line["logger"] for line in logged}
    assert "psycopg.pool" in loggers, err  # a library's warnings, in JSON too
    assert "nbdurable.runs" in loggers  # --log-level INFO: the lifecycle lines
    assert any(line["message"].startswith("nbdurable worker draining") for line in logged)
    assert 503 in prober.answers  # /readyz saw the outage


async def test_a_worker_stopped_while_its_store_is_down_exits_cleanly(
    pg: PgServer, tmp_path: Path
) -> None:
    """SIGTERM with /readyz answers waiting on the store: they end with the process."""
    url = _database(pg)
    runs = await _submit_sleepers(url, 2)
    proc = worker(
        url,
        tmp_path / "log",
        "--log-format", "json", "--metrics-port", "0", "--drain-seconds", "1",
        lease_ms=30_000,
    )  # fmt: skip
    try:
        lines, base = _first_lines(proc, "serving")
        wait_until(lambda: any(run.record().state == "running" for run in runs), timeout=30)
        pg.stop_server()
        prober = _Prober(base)
        await asyncio.sleep(2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        prober.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (0, 2), err
    logged = _every_line_json("".join(lines) + out, err)
    assert any(line["logger"] == "psycopg.pool" for line in logged), err


async def test_serve_stopped_while_its_store_is_down_exits_within_seconds(pg: PgServer) -> None:
    """SIGTERM with the store away: ``nbdurable serve`` stops retrying it after
    ``STOP_STORE_SECONDS`` (it took the 60-s retry budget), every line JSON."""
    url = _database(pg)
    runs = await _submit_sleepers(url, 2)
    proc = _serve(url, "--log-format", "json")
    try:
        lines, _ = _first_lines(proc, "nbdurable serve:")
        wait_until(lambda: any(run.record().state == "running" for run in runs), timeout=30)
        pg.stop_server()
        await asyncio.sleep(1)
        proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        out, err = proc.communicate(timeout=90)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert took < STOP_STORE_SECONDS + 5, (took, err)
    _every_line_json("".join(lines) + out, err)
