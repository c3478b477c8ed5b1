"""PostgreSQL restarted under running workers: `nbdurable worker` processes on one store.

Used by tests/runtime/test_store_outage.py (a fast version) and
benchmarks/pg_restart_torture.py (the full count). The workers serve
tests/support/runtime_agents.py, whose tools append one line per execution to a file,
so executions are counted across processes.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from support.pgserver import PgServer
from support.runtime_harness import executions, worker


@dataclass
class RestartReport:
    """What a restart torture did and found."""

    runs: int = 0
    restarts: int = 0
    states: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    executions: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    seconds: float = 0.0
    worker_codes: list[int | None] = field(default_factory=list)
    worker_logs: list[str] = field(default_factory=list)

    @property
    def doubled(self) -> int:
        """Tool calls that started more than once."""
        return sum(1 for n in self.executions.values() if n > 1)

    @property
    def completed(self) -> int:
        return self.states["completed"]

    def summary(self) -> str:
        states = ", ".join(f"{state} {n}" for state, n in sorted(self.states.items()))
        errors = "; ".join(f"{n}x {error}" for error, n in self.errors.most_common(3))
        return (
            f"runs {self.runs}, restarts {self.restarts}: {states}; tool calls started twice: "
            f"{self.doubled}; {self.seconds:.1f} s" + (f"; errors: {errors}" if errors else "")
        )


def _records(store: Any) -> list[Any] | None:
    """Every run record, or None while the server is unreachable."""
    try:
        return list(store.rt_list())
    except Exception:
        return None


async def restart_torture(
    server: PgServer,
    url: str,
    log: Path,
    *,
    runs: int,
    workers: int = 3,
    restarts: int = 2,
    down_seconds: float = 0.0,
    worker_args: tuple[str, ...] = (),
    lease_ms: int = 10_000,
    settle_seconds: float = 60.0,
) -> RestartReport:
    """Submit ``runs`` runs, start ``workers`` workers, restart PostgreSQL ``restarts`` times.

    A restart happens each time another ``runs / (restarts + 1)`` runs have
    finished, so runs are in flight at every restart (model calls, tools,
    checkpoint and event writes). Then it waits up to ``settle_seconds`` for
    every run to finish, stops the workers (SIGTERM) and reads the outcome.
    """
    started = time.monotonic()
    report = RestartReport(runs=runs)
    from support import runtime_agents

    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=runtime_agents.agents)  # submits only
    for i in range(runs):
        await client.submit("torture", f"job {i}")
    procs = [
        worker(url, log, "--max-concurrent-runs", "3", *worker_args, lease_ms=lease_ms)
        for _ in range(workers)
    ]
    try:
        for n in range(1, restarts + 1):
            threshold = runs * n // (restarts + 1)
            while True:
                found = _records(store)
                if found is not None and sum(r.finished for r in found) >= threshold:
                    break
                if time.monotonic() - started > settle_seconds:
                    break
                await asyncio.sleep(0.02)
            await asyncio.to_thread(server.restart, "fast", down_seconds)
            report.restarts += 1
        deadline = time.monotonic() + settle_seconds
        while time.monotonic() < deadline:
            found = _records(store)
            if found is not None and all(r.finished for r in found):
                break
            await asyncio.sleep(0.1)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            report.worker_codes.append(proc.returncode)
            report.worker_logs.append(err)
    found = None
    for _ in range(50):
        found = _records(store)
        if found is not None:
            break
        await asyncio.sleep(0.1)
    assert found is not None, "the server did not come back"
    report.states = Counter(r.state for r in found)
    report.errors = Counter(r.error or r.reason or "" for r in found if r.state != "completed")
    report.executions = executions(log)
    report.seconds = time.monotonic() - started
    store.close()
    return report
