"""``nbdurable serve`` on a PostgreSQL store that goes down and comes back: a scrape of
``/metrics`` answers within a second (``nbdurable_store_up 0``) and never holds the API's event
loop, ``/readyz`` is unready and then ready again within seconds (a real server, a real bridge)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from support.pgserver import find_pg_bin, start_server
from support.scraping import samples, value

TESTS = Path(__file__).resolve().parents[1]


def _serve(url: str) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["NBDURABLE_SERVER_TOKEN"] = "probe-token"
    command = [
        sys.executable, "-m", "nbdurable.cli", "serve", "--store", url,
        "--agents", "server.agents:agents", "--port", "0", "--poll-interval", "0.05",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(process.communicate(timeout=10))
        if line.startswith("nbdurable serve:"):
            return process, line.split()[2]


def _timed(url: str) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    response = httpx.get(url, timeout=40)
    return response, time.monotonic() - began


def test_serve_metrics_and_readyz_through_a_postgresql_outage(tmp_path: Path) -> None:
    if find_pg_bin() is None:
        pytest.fail("PostgreSQL is not installed (bash .ci/run installs it)", pytrace=False)
    server = start_server()
    process = None
    try:
        name = f"t_{uuid.uuid4().hex}"
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        process, base = _serve(f"postgresql://postgres@127.0.0.1:{server.port}/{name}")
        assert httpx.get(f"{base}/readyz").status_code == 200
        server.stop_server()
        took: list[float] = []

        def scrape() -> None:
            response, seconds = _timed(f"{base}/metrics")
            took.append(seconds)
            assert response.status_code == 200

        deadline = time.monotonic() + 10
        up = 1.0
        while up != 0:
            assert time.monotonic() < deadline, "nbdurable_store_up stayed 1"
            scraper = threading.Thread(target=scrape)
            scraper.start()
            # the API's loop answers while a scrape waits on the store
            health, seconds = _timed(f"{base}/healthz")
            assert health.status_code == 200 and seconds < 1.0, seconds
            scraper.join()
            response, seconds = _timed(f"{base}/metrics")
            took.append(seconds)
            up = value(samples(response.text), "nbdurable_store_up")
        assert max(took) < 1.0, took
        ready, seconds = _timed(f"{base}/readyz")
        assert ready.status_code == 503 and ready.text.startswith("not ready: store")
        assert seconds < 4.5
        server.start_server()
        began = time.monotonic()
        while httpx.get(f"{base}/readyz", timeout=10).status_code != 200:
            assert time.monotonic() - began < 5, "/readyz not ready 5 s after the server"
            time.sleep(0.1)
        while True:  # the pool reconnects on its own schedule: within seconds too
            response, seconds = _timed(f"{base}/metrics")
            assert seconds < 1.0
            if value(samples(response.text), "nbdurable_store_up") == 1:
                break
            assert time.monotonic() - began < 10, "nbdurable_store_up stayed 0"
            time.sleep(0.1)
    finally:
        if process is not None:
            process.send_signal(signal.SIGTERM)
            try:
                process.communicate(timeout=30)
            finally:
                if process.poll() is None:
                    process.kill()
        server.stop()
