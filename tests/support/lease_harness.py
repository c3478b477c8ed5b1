"""Pause-and-takeover trials with real worker processes (SIGSTOP past the lease, SIGCONT).

Used by tests/runtime/test_lease_takeover.py (one trial per store) and
benchmarks/lease_pause_torture.py (many).
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from support import lease_agents, runtime_harness

HERE = Path(__file__).resolve().parent


def worker(
    url: str,
    log: Path,
    *extra: str,
    lease_ms: int = 1000,
    tool_seconds: float = 1.0,
    poll_interval: float = 0.02,
) -> subprocess.Popen[str]:
    """Start `nbdurable worker` serving tests/support/lease_agents.py."""
    return runtime_harness.worker(
        url,
        log,
        *extra,
        lease_ms=lease_ms,
        agents="support.lease_agents:agents",
        env={"NBDURABLE_TEST_TOOL_SECONDS": str(tool_seconds)},
        poll_interval=poll_interval,
    )


def store_write_blocked(url: str) -> bool:
    """Whether another process holds the store's write lock right now.

    SQLite's write lock, or on PostgreSQL a transaction left open (a worker
    paused inside it holds its run's row lock: a claim skips that run until the
    server ends the session, see docs/runtime.md), so a trial that wants a
    takeover pauses it outside one.
    """
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///") :], timeout=0.05, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()
    import psycopg

    # No schema-wide lock any more: what a paused worker can hold is its runs'
    # row locks, inside a transaction left open.
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%%')"
        )
        found = row.fetchone()
        return bool(found and found[0])


async def pause_outside_writes(process: subprocess.Popen[str], url: str) -> int:
    """SIGSTOP ``process`` at a moment it holds no store write lock; how many tries it took."""
    for attempt in range(1, 200):
        process.send_signal(signal.SIGSTOP)
        await asyncio.sleep(0.01)  # the stop is delivered
        if not store_write_blocked(url):
            return attempt
        process.send_signal(signal.SIGCONT)
        await asyncio.sleep(0.005)
    raise AssertionError("the worker never left its store transactions")


async def wait_for(check: object, timeout: float, what: str) -> None:
    """Poll ``check()`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@dataclass
class PauseTrial:
    """What one pause-and-takeover trial saw."""

    effects: int = 0
    attention_reason: str = ""
    final_state: str = ""
    recorded_by: int | None = None
    paused_pid: int = 0
    retried_pid: int = 0
    fence: int = 0
    wake: str = ""
    stale_errors: list[str] = field(default_factory=list)
    pause_tries: int = 0
    explained: str = ""
    takeovers: list[dict[str, object]] = field(default_factory=list)


async def pause_trial(
    url: str, log: Path, agent: str, *, wake: str = "after", pause_after: float = 0.0
) -> PauseTrial:
    """One trial: a worker pauses mid-tool past its lease, another takes the run over.

    The run's ``manual`` tool is interrupted by the pause, so the taker parks the
    run in ``needs_attention``; a human retries; a third worker runs the tool
    again. The paused worker is woken (SIGCONT) ``before`` the retry, ``during``
    the retried call, or ``after`` the run completed; then stopped. The pause
    comes ``pause_after`` seconds into the first call.
    """
    trial = PauseTrial(wake=wake)
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=lease_agents.agents)  # submits and watches
    run = await client.submit(agent, "pay once")
    paused = worker(url, log, "--max-concurrent-runs", "1")
    trial.paused_pid = paused.pid
    try:
        await wait_for(lambda: paused.pid in lease_agents.starts(log), 60, "the first start")
        await asyncio.sleep(pause_after)
        trial.pause_tries = await pause_outside_writes(paused, url)
        taker = worker(url, log, "--exit-when-idle")
        taker.communicate(timeout=60)
        record = run.record()
        trial.attention_reason = record.reason or ""
        trial.explained = str(nd.inspect.explain(store, run.run_id))
        if wake == "before":
            paused.send_signal(signal.SIGCONT)
            await asyncio.sleep(1.0)  # its call wakes and tries to act
            # Stop it, so the retried call runs in the third worker: left alive it
            # could claim the retried run itself (a fresh, legitimate claim).
            paused.send_signal(signal.SIGTERM)
            paused.wait(timeout=60)
        # the human retries knowing any late result (explain above shows it): run it again
        await run.retry(rerun=True)
        retried = worker(url, log, "--exit-when-idle")
        trial.retried_pid = retried.pid
        if wake == "during":
            await wait_for(lambda: retried.pid in lease_agents.starts(log), 60, "the retry")
            paused.send_signal(signal.SIGCONT)
        retried.communicate(timeout=60)
        if wake == "after":
            paused.send_signal(signal.SIGCONT)
        await asyncio.sleep(1.5)  # the paused worker's tool wakes and tries to act
    finally:
        if paused.poll() is None:
            paused.send_signal(signal.SIGCONT)
            paused.send_signal(signal.SIGTERM)
        _out, err = paused.communicate(timeout=60)
    trial.stale_errors = [line for line in err.splitlines() if "Traceback" in line]
    record = run.record()
    trial.final_state = record.state
    trial.fence = record.fence
    trial.effects = lease_agents.effects(log)[run.run_id]
    events = await nd.read_events(store, run.run_id)
    trial.takeovers = [e.payload for e in events if e.type == "run_taken_over"]
    checkpoint = store.load(run.run_id)
    if checkpoint is not None and checkpoint.status == "completed":
        result = str(checkpoint.messages[2].tool_results[0].result)
        trial.recorded_by = int(result.rsplit(" ", 1)[-1]) if result.startswith("paid") else None
    store.close()
    return trial


@dataclass
class KillTrial:
    """What one dead-owner takeover saw."""

    run_id: str
    owner_pid: int
    taker_pid: int
    seconds: float
    final_state: str
    taker_errors: str


async def kill_trial(url: str, log: Path, *, lease_ms: int = 30_000) -> KillTrial:
    """One trial: a worker is SIGKILLed inside its tool while another one already runs.

    The killed worker is left unreaped (a zombie) until the takeover: gone all the
    same. ``seconds`` runs from the kill to the moment the other worker's claim is
    in the store.
    """
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=lease_agents.agents)
    run = await client.submit("long", "work")
    owner = worker(url, log, lease_ms=lease_ms, tool_seconds=60)
    await wait_for(lambda: owner.pid in lease_agents.starts(log), 60, "the owner's tool")
    taker = worker(url, log, "--exit-when-idle", lease_ms=lease_ms, tool_seconds=0.2)
    ready = await asyncio.to_thread(taker.stdout.readline)  # type: ignore[union-attr]
    assert "serving" in ready, ready
    owner.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    try:
        await wait_for(lambda: run.record().fence == 2, 60, "the takeover")
        seconds = time.monotonic() - killed
    finally:
        owner.communicate(timeout=30)
        _out, err = taker.communicate(timeout=60)
    trial = KillTrial(run.run_id, owner.pid, taker.pid, seconds, run.status, err)
    store.close()
    return trial
