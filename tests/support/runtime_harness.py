"""Crash harness for the runtime: workers as subprocesses, SIGKILLed at random points.

Used by tests/runtime/test_crash.py (a fast version) and
benchmarks/runtime_crash_torture.py (the long one).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import nbdurable as nd
from nbdurable.runtime import DurableRuntime

TESTS = Path(__file__).resolve().parents[1]  # holds the support package


def worker(
    url: str,
    log: Path | None,
    *extra: str,
    lease_ms: int = 400,
    agents: str = "support.runtime_agents:agents",
    path: Path = TESTS,
    env: dict[str, str] | None = None,
    poll_interval: float = 0.02,
) -> subprocess.Popen[str]:
    """Start `nbdurable worker` serving ``agents`` (a module under ``path``), in its own process.

    ``log`` (as ``NBDURABLE_TEST_LOG``) is where the test agents record their tool
    executions; ``env`` adds variables of the agents' own.
    """
    variables = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")]),
    }
    if log is not None:
        variables["NBDURABLE_TEST_LOG"] = str(log)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nbdurable.cli",
            "worker",
            "--store",
            url,
            "--agents",
            agents,
            "--lease-ms",
            str(lease_ms),
            "--poll-interval",
            str(poll_interval),
            *extra,
        ],
        env=variables,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def executions(log: Path) -> Counter[tuple[str, str, str]]:
    """(tool, run_id, tool_call_id) -> how many times it started."""
    if not log.exists():
        return Counter()
    lines = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return Counter((kind, run_id, call) for kind, run_id, call in lines)


@dataclass
class TortureReport:
    """What a torture run did and found."""

    kills: int = 0
    runs: int = 0
    completed: int = 0
    retries: Counter[str] = field(default_factory=Counter)
    safe_reruns: int = 0
    manual_reruns: int = 0
    seconds: float = 0.0


async def torture(url: str, log: Path, *, runs: int, kills: int, seed: int = 0) -> TortureReport:
    """Submit ``runs`` torture runs, kill workers ``kills`` times, then finish them all.

    Runs parked in needs_attention (a manual tool interrupted) get an explicit
    ``retry()``, counted per run, as a human would decide.
    """
    rng = random.Random(seed)
    started = time.monotonic()
    report = TortureReport(runs=runs)
    store = nd.open_store(url)
    from support import runtime_agents

    client = DurableRuntime(store=store, agents=runtime_agents.agents)  # submits only
    handles = [await client.submit("torture", f"job {i}") for i in range(runs)]
    for _ in range(kills):
        proc = worker(url, log)
        await asyncio.sleep(rng.uniform(0.45, 1.1))  # startup, then mid-model, mid-tool, mid-save
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        report.kills += 1
        for handle in handles:
            if handle.status == "needs_attention":
                await handle.retry()
                report.retries[handle.run_id] += 1
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        proc = worker(url, log, "--exit-when-idle")
        proc.wait(timeout=120)
        waiting = [h for h in handles if h.status == "needs_attention"]
        for handle in waiting:
            await handle.retry()
            report.retries[handle.run_id] += 1
        if all(h.status == "completed" for h in handles):
            break
    report.completed = sum(h.status == "completed" for h in handles)
    counts = executions(log)
    report.safe_reruns = sum(n - 1 for (kind, _, _), n in counts.items() if kind == "safe")
    report.manual_reruns = sum(n - 1 for (kind, _, _), n in counts.items() if kind == "manual")
    report.seconds = time.monotonic() - started
    store.close()
    return report


def check_histories(url: str, run_ids: list[str]) -> None:
    """Every completed run's history is exactly the scripted one: nothing lost, nothing twice."""
    store = nd.open_store(url)
    try:
        for run_id in run_ids:
            checkpoint = store.load(run_id)
            assert checkpoint is not None and checkpoint.status == "completed", run_id
            roles = [m.role for m in checkpoint.messages]
            assert roles == [
                "user",
                "assistant",
                "tool",
                "assistant",
                "tool",
                "assistant",
                "tool",
                "assistant",
            ], (run_id, roles)
            calls = [c.tool_call_id for m in checkpoint.messages for c in m.tool_calls]
            assert len(calls) == len(set(calls)) == 3
            steps = [info.step_index for info in store.history(run_id)]
            assert steps == sorted(steps)
    finally:
        store.close()


def run_async(coro: object) -> object:
    """Run a coroutine from sync code (the benchmark script)."""
    return asyncio.run(coro)  # type: ignore[arg-type]
