"""The runtime under SIGKILL, SIGSTOP and SIGTERM, with real worker processes (SQLite;
the crash torture and the two-workers test on PostgreSQL too)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from support import runtime_agents
from support.runtime_harness import check_histories, executions, torture, worker
from support.waiting import eventually

import nbdurable as nd
from nbdurable.runtime import DurableRuntime


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every worker-process test runs on SQLite and on PostgreSQL."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_database"))
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.mark.spec("S004-07", "S004-08", "S004-09", "S004-10", "S004-11")
async def test_crash_torture_every_run_completes_nothing_lost_or_doubled(
    tmp_path: Path, url: str
) -> None:
    """Workers SIGKILLed at random points (no
    user code but the choice of runtime): every run completes with its exact history; a
    manual tool never runs twice without a retry; a safe tool runs at most once more per kill."""
    log = tmp_path / "executions.log"
    report = await torture(url, log, runs=6, kills=12, seed=7)
    store = nd.open_store(url)
    run_ids = [r.run_id for r in store.rt_list()]  # type: ignore[attr-defined]
    store.close()
    assert report.completed == report.runs == 6
    check_histories(url, run_ids)
    counts = executions(log)
    for (kind, run_id, _call), n in counts.items():
        if kind == "manual":
            assert n <= 1 + report.retries[run_id], (run_id, n, report.retries[run_id])
        else:
            assert n <= 1 + report.kills
    # every scripted call ran at least once for every run
    assert {(k, r) for (k, r, _c) in counts} >= {
        (k, r) for r in run_ids for k in ("safe", "manual")
    }


@pytest.mark.spec("S004-08")
async def test_two_workers_one_store_no_step_runs_twice(tmp_path: Path, url: str) -> None:
    """Two workers share a store and 100 runs: each tool call executes exactly once."""
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=runtime_agents.agents)
    handles = [await client.submit("single", f"job {i}") for i in range(100)]
    workers = [
        worker(url, log, "--exit-when-idle", "--max-concurrent-runs", "8", lease_ms=30_000)
        for _ in range(2)
    ]
    for proc in workers:
        _out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
    assert all(h.status == "completed" for h in handles)
    counts = executions(log)
    assert len(counts) == 100 and set(counts.values()) == {1}
    owners = {h.record().fence for h in handles}
    assert owners == {1}  # every run was claimed once
    store.close()


async def test_a_paused_owner_is_fenced_out_when_it_wakes(tmp_path: Path, url: str) -> None:
    """SIGSTOP past the lease: another worker takes over; the old owner's writes are refused."""
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=runtime_agents.agents)
    run = await client.submit("sleeper", "sleep")
    first = worker(url, log, lease_ms=300)
    while not executions(log):  # the first owner is inside the slow tool
        await asyncio.sleep(0.02)
    first.send_signal(signal.SIGSTOP)
    second = worker(url, log, "--exit-when-idle", lease_ms=300)
    second.wait(timeout=60)
    assert run.status == "completed" and run.record().fence == 2
    first.send_signal(signal.SIGCONT)  # wakes, finishes its tool, tries to write
    # its refused write leaves the outcome as a late result: it has tried by then
    await eventually(lambda: bool(run.record().late_results), 30)
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=30)
    record = run.record()
    assert record.state == "completed" and record.fence == 2
    checkpoint = store.load(run.run_id)
    assert [m.role for m in checkpoint.messages] == ["user", "assistant", "tool", "assistant"]
    assert [i.step_index for i in store.history(run.run_id)] == [0, 1]
    store.close()


async def test_sigterm_stops_gracefully_and_releases_leases(tmp_path: Path, url: str) -> None:
    """A stopped worker abandons its step cleanly: the run is pending again, not failed."""
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=runtime_agents.agents)
    run = await client.submit("sleeper", "sleep")
    proc = worker(url, log, lease_ms=60_000)
    while not executions(log):
        await asyncio.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    record = run.record()
    assert record.state == "pending" and record.lease_owner is None
    # the next worker takes it at once (no lease to wait out) and finishes it
    again = worker(url, log, "--exit-when-idle", lease_ms=60_000)
    again.wait(timeout=60)
    assert run.status == "completed"
    store.close()


async def test_a_manual_tool_interrupted_by_a_crash_waits_for_a_human(
    tmp_path: Path, url: str
) -> None:
    """Crash mid-manual-tool: needs_attention, never re-run by itself; retry() runs it again,
    deny() settles it as an is_error result."""
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=runtime_agents.agents)
    retried = await client.submit("charger", "charge it")
    denied = await client.submit("charger", "charge it too")
    proc = worker(url, log, lease_ms=200)
    while len(executions(log)) < 2:
        await asyncio.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    worker(url, log, "--exit-when-idle", lease_ms=200).wait(timeout=60)
    assert retried.status == denied.status == "needs_attention"
    assert sum(executions(log).values()) == 2  # nothing re-ran on its own
    await retried.retry()
    await denied.deny(reason="charged by hand already")
    worker(url, log, "--exit-when-idle", lease_ms=200).wait(timeout=60)
    assert retried.status == denied.status == "completed"
    counts = executions(log)
    assert sorted(counts.values()) == [1, 2]  # only the retried charge ran again
    result = store.load(denied.run_id).messages[2].tool_results[0]
    assert result.is_error and result.result == "charged by hand already"
    store.close()


async def test_a_retry_allows_one_more_run_of_a_manual_tool_not_more(
    tmp_path: Path, url: str
) -> None:
    """A retry's permission is used up when the tool starts: a second crash asks again."""
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=runtime_agents.agents)
    run = await client.submit("charger", "charge it")
    for expected in (1, 2):
        proc = worker(url, log, lease_ms=200)
        while sum(executions(log).values()) < expected:
            await asyncio.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        worker(url, log, "--exit-when-idle", lease_ms=200).wait(timeout=60)
        assert run.status == "needs_attention"
        assert sum(executions(log).values()) == expected
        await run.retry()
    worker(url, log, "--exit-when-idle", lease_ms=200).wait(timeout=60)
    assert run.status == "completed"
    assert sum(executions(log).values()) == 3  # one run per retry, never one more
    store.close()
