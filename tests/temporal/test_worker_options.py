"""`nbdurable worker --engine temporal` refuses bad settings at once, naming them (issue 39)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .conftest import ROOT

COMMAND = ["-m", "nbdurable.cli", "worker", "--engine", "temporal", "--store", "memory://"]
AGENTS = ["--agents", "support.temporal_agents:agents"]


def refused(env: dict[str, str], *args: str) -> str:
    """The worker's error line; it exits with status 2 before connecting anywhere."""
    done = subprocess.run(
        [sys.executable, *COMMAND, *AGENTS, *args],
        cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    return done.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("queue", ["", "  "])
def test_an_empty_task_queue_is_refused(queue: str) -> None:
    line = refused({"NBDURABLE_TASK_QUEUE": queue})
    assert "NBDURABLE_TASK_QUEUE" in line and "task queue's name is not empty" in line, line
    assert "--task-queue" in refused({}, "--task-queue", queue)


@pytest.mark.parametrize("seconds", ["-5", "nan", "inf"])
def test_a_drain_that_is_no_number_of_seconds_is_refused(seconds: str) -> None:
    line = refused({"NBDURABLE_DRAIN_SECONDS": seconds})
    assert "NBDURABLE_DRAIN_SECONDS" in line and "not a number of seconds" in line, line
    assert "--drain-seconds" in refused({}, f"--drain-seconds={seconds}")
