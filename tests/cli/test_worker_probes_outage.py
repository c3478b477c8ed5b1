"""`nbdurable worker --metrics-port` through PostgreSQL outages: `/metrics` answers within a
second with `nbdurable_store_up 0` while the server is down, `/readyz` is unready then and ready
again within seconds of the server's return, outage after outage (a real server, stopped and
started three times, and a worker in its own process)."""

from __future__ import annotations

import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from support.pgserver import find_pg_bin, start_server
from support.runtime_harness import worker
from support.scraping import metrics_base, samples, value

CYCLES = 3
SCRAPE_LIMIT_S = 1.0  # a Prometheus scrape must get its answer in this (the issue: 30 s)
READY_AFTER_S = 5.0  # /readyz is ready this soon after the server accepts connections


def _timed_get(url: str) -> tuple[int, str, float]:
    """Status, body and seconds taken of a GET (an HTTP error's too)."""
    began = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=40) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    return status, body, time.monotonic() - began


def _store_up(base: str, took: list[float]) -> float:
    status, body, seconds = _timed_get(f"{base}/metrics")
    took.append(seconds)
    assert status == 200, body
    assert seconds < SCRAPE_LIMIT_S, f"/metrics took {seconds:.1f} s"
    return value(samples(body), "nbdurable_store_up")


def _within(seconds: float, check: Callable[[], bool], what: str) -> float:
    """Poll ``check`` until true; how long it took (fails past ``seconds``)."""
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < seconds, f"{what} not within {seconds} s"
        time.sleep(0.1)
    return time.monotonic() - began


async def test_metrics_and_readyz_hold_through_repeated_postgresql_outages(
    tmp_path: Path,
) -> None:
    if find_pg_bin() is None:
        pytest.fail("PostgreSQL is not installed (bash .ci/run installs it)", pytrace=False)
    server = start_server()
    proc: subprocess.Popen[str] | None = None
    try:
        name = f"t_{uuid.uuid4().hex}"
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        url = f"postgresql://postgres@127.0.0.1:{server.port}/{name}"
        # A long retry budget: the worker rides out every outage, as in production.
        proc = worker(
            url,
            tmp_path / "log",
            "--metrics-port",
            "0",
            "--store-retry-ms",
            "600000",
            lease_ms=30_000,
        )
        base = metrics_base(proc)
        _within(30, lambda: _timed_get(f"{base}/readyz")[0] == 200, "ready at start")
        scrapes: list[float] = []
        readyz: list[float] = []
        recovered: list[float] = []
        for _ in range(CYCLES):
            server.stop_server()
            _within(10, lambda: _store_up(base, scrapes) == 0, "nbdurable_store_up 0")

            def unready() -> bool:
                status, body, seconds = _timed_get(f"{base}/readyz")
                readyz.append(seconds)
                assert seconds < 4.5, f"/readyz took {seconds:.1f} s"
                return status == 503 and body.startswith("not ready: store")

            _within(10, unready, "/readyz unready")
            for _ in range(3):  # scraped while the server stays down: still fast, still 0
                assert _store_up(base, scrapes) == 0
            assert _timed_get(f"{base}/healthz")[0] == 200
            server.start_server()
            recovered.append(
                _within(
                    READY_AFTER_S,
                    lambda: _timed_get(f"{base}/readyz")[0] == 200,
                    "/readyz ready after the server came back",
                )
            )
            _within(READY_AFTER_S, lambda: _store_up(base, scrapes) == 1, "nbdurable_store_up 1")
            assert proc.poll() is None
        print(  # the figures, for the record (pytest -s)
            f"/metrics slowest {max(scrapes):.2f} s of {len(scrapes)}; /readyz slowest "
            f"{max(readyz):.2f} s; ready after {', '.join(f'{s:.1f}' for s in recovered)} s"
        )
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
        server.stop()
