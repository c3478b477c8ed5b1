"""Slow clients against a real ``nbdurable serve``: each is closed within the read deadlines.

A hundred connections on 127.0.0.1 (silent ones, ones dribbling their headers a
byte at a time, ones dribbling their body) against ``--header-timeout 2
--body-timeout 2``: every one is closed within the bound (with a 408 when part
of a request came), and a normal client is served promptly all the while.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.serial  # it times 100 slow connections against their deadlines

TESTS = Path(__file__).resolve().parents[1]
TOKEN = "deadline-token"
HEADER_S = 2.0
BODY_S = 2.0
SLACK_S = 1.5
"""What the bound may be exceeded by on a loaded machine (timers, scheduling)."""
DRIBBLE_S = 0.25
"""A slow client's pause between two bytes."""
GIVE_UP_S = max(HEADER_S, BODY_S) + SLACK_S + 3
"""When a slow client stops waiting for the server to close its connection."""


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[str]:
    with _serving(tmp_path) as url:
        yield url


@contextlib.contextmanager
def _serving(tmp_path: Path, *extra: str) -> Iterator[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["NBDURABLE_SERVER_TOKEN"] = TOKEN
    command = [
        sys.executable, "-m", "nbdurable.cli", "serve", "--store", f"sqlite:///{tmp_path}/r.db",
        "--agents", "server.agents:agents", "--port", "0",
        "--header-timeout", str(HEADER_S), "--body-timeout", str(BODY_S), *extra,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise AssertionError(process.communicate(timeout=10))
    try:
        yield line.split()[2]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()


async def _slow_client(url: str, kind: str) -> tuple[str, float, bytes]:
    """Open a connection and send ``kind``'s request slowly until the server closes it.

    Returns:
        ``kind``, the seconds from opening until the server closed, and what it answered.
    """
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    opened = time.monotonic()
    if kind == "header":
        head, dribble = b"GET /runs HTTP/1.1\r\nHost: x\r\n", b"X-Slow: " + b"a" * 10_000
    elif kind == "body":
        head = (
            b"POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 10000\r\n\r\n"
        )
        dribble = b" " * 10_000
    elif kind == "preflight":  # CORS answers a preflight without reading its body
        head = (
            b"OPTIONS /runs HTTP/1.1\r\nHost: x\r\nOrigin: http://notebook.test\r\n"
            b"Access-Control-Request-Method: POST\r\nContent-Length: 10000\r\n\r\n"
        )
        dribble = b" " * 10_000
    else:  # silent: connects and sends nothing
        head, dribble = b"", b""
    answer = b""

    async def read_all() -> None:
        nonlocal answer
        while chunk := await reader.read(65536):
            answer += chunk

    reading = asyncio.ensure_future(read_all())
    try:
        async with asyncio.timeout(GIVE_UP_S):
            writer.write(head)
            for byte in dribble:
                if reading.done():
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.wait({reading}, timeout=DRIBBLE_S)
            await reading
    except TimeoutError:  # still open: the server holds it (before OSError: a subclass)
        reading.cancel()
        writer.close()
        return kind, float("inf"), answer
    except (ConnectionError, OSError):
        await asyncio.wait({reading}, timeout=5)
    closed = time.monotonic() - opened
    writer.close()
    return kind, closed, answer


async def _normal_client(url: str, stop: asyncio.Event) -> list[float]:
    """GET /runs with the token every 0.1 s until ``stop``; each answer's latency."""
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as http:
        while not stop.is_set():
            began = time.monotonic()
            response = await http.get("/runs")
            assert response.status_code == 200, response.text
            latencies.append(time.monotonic() - began)
            await asyncio.sleep(0.1)
    return latencies


async def test_a_hundred_slow_connections_are_closed_within_the_bound(bridge: str) -> None:
    kinds = ["silent"] * 20 + ["header"] * 40 + ["body"] * 40
    stop = asyncio.Event()
    normal = asyncio.ensure_future(_normal_client(bridge, stop))
    results = await asyncio.gather(*(_slow_client(bridge, kind) for kind in kinds))
    await asyncio.sleep(0.5)
    stop.set()
    latencies = await normal
    for kind, closed, answer in results:
        bound = (HEADER_S if kind != "body" else BODY_S) + SLACK_S
        assert closed <= bound, (kind, closed)
        if kind == "silent":
            assert answer == b"", answer
            continue
        status, _, rest = answer.partition(b"\r\n")
        assert status == b"HTTP/1.1 408 Request Timeout", (kind, answer[:300])
        error = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
        assert error["type"] == "RequestTimeoutError"
        assert ("header_timeout" if kind == "header" else "body_timeout") in error["message"]
    slowest = max(closed for _, closed, _ in results)
    print(f"100 slow connections closed within {slowest:.2f} s; normal client: "
          f"{len(latencies)} requests, slowest {max(latencies) * 1000:.0f} ms")  # fmt: skip
    assert len(latencies) >= 10 and max(latencies) < 1.0, latencies


async def test_a_kept_alive_connections_next_request_has_the_same_deadline(bridge: str) -> None:
    host, port = bridge.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    first = await asyncio.wait_for(reader.readuntil(b"ok\n"), 10)
    assert first.startswith(b"HTTP/1.1 200"), first
    writer.write(b"GET /healthz HTTP/1.1\r\n")  # the next request, never finished
    began = time.monotonic()
    rest = await asyncio.wait_for(reader.read(), GIVE_UP_S)
    assert time.monotonic() - began <= HEADER_S + SLACK_S
    assert rest.startswith(b"HTTP/1.1 408"), rest
    writer.close()


def test_the_deadlines_must_be_positive(tmp_path: Path) -> None:
    from nbdurable.cli import main

    store = f"sqlite:///{tmp_path}/r.db"
    for flag in ("--header-timeout", "--body-timeout"):
        argv = ["serve", "--store", store, "--agents", "server.agents:agents", flag, "0"]
        assert main(argv) == 2


async def test_a_cors_preflight_body_has_the_same_deadline(tmp_path: Path) -> None:
    with _serving(tmp_path, "--cors-origin", "http://notebook.test") as url:
        kind, closed, answer = await _slow_client(url, "preflight")
    assert closed <= BODY_S + SLACK_S, (kind, closed)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
