"""Worker subprocesses on the real Temporal dev server (``temporal_server``, tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from support import temporal_agents, temporal_tasks
from support.workers import ROOT as ROOT  # re-exported for the tests here
from support.workers import WORKER_COMMAND as WORKER_COMMAND
from support.workers import Worker

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.temporal import TemporalEngine


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
