"""`nbdurable worker` subprocesses of either engine, for tests that need real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from nbdurable.temporal._devserver import stop_process

ROOT = Path(__file__).resolve().parents[2]

WORKER_COMMAND = ("-m", "nbdurable.cli", "worker")
"""What a Worker runs by default: ``python -m nbdurable.cli worker ...``."""

SERVED = ["--agents", "support.temporal_agents:agents"]
"""The agents a worker serves by default."""
SERVED_WITH_TASKS = [
    "--agents",
    "support.temporal_tasks:agents",
    "--tasks",
    "support.temporal_tasks:tasks",
]
"""temporal_tasks.agents holds temporal_agents.agents too, and the tasks' agents."""


class Worker:
    """A `nbdurable worker` subprocess: ``--engine temporal`` on ``address`` and ``queue``
    (``address`` None: the embedded engine; ``restate``, the server's ingress and admin
    URLs: ``--engine restate``, an SDK endpoint), serving the test agents (and tasks).

    The constructor returns once the worker said it is ready.
    """

    def __init__(
        self,
        address: str | None,
        queue: str,
        store_url: str,
        env: dict[str, str],
        tasks: bool = False,
        args: Sequence[str] = (),
        command: Sequence[str] = WORKER_COMMAND,
        restate: tuple[str, str] | None = None,
    ) -> None:
        served = SERVED_WITH_TASKS if tasks else SERVED
        if restate is not None:
            engine = ["--engine", "restate", "--ingress", restate[0], "--admin", restate[1]]
        elif address is None:
            engine = ["--engine", "embedded"]
        else:
            engine = ["--engine", "temporal", "--address", address, "--task-queue", queue]
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *command,
                *engine,
                "--store",
                store_url,
                *served,
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
        assert ("polling" if address is not None else "serving") in line, line

    def kill(self) -> None:
        """SIGKILL, by PID."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM, by PID (SIGKILL after 10 s)."""
        stop_process(self.proc)
