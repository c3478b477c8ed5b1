"""Prometheus metrics of the embedded engine, read back with the Prometheus text parser:
failed runs, model retries, store errors, lost leases, and store-wide gauges left out."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import lease_agents
from support.lease_harness import pause_outside_writes, wait_for
from support.lease_harness import worker as lease_worker
from support.runtime_harness import worker
from support.scraping import families, get, metrics_base, samples, scrape, value
from support.sqlite_locker import hold_write_lock

import nbdurable as nd
from nbdurable import metrics
from nbdurable.runtime import Agent, DurableRuntime, ModelRetry, RunFailedError

FAST = ModelRetry(max_attempts=3, initial_delay_ms=10, max_delay_ms=20)


@pytest.fixture
def enabled(tmp_path: Path) -> Iterator[nd.SqliteSessionStore]:
    """Metrics on in this process, counting the runs of a fresh SQLite store."""
    store = nd.SqliteSessionStore(tmp_path / "runs.db", busy_timeout=0.1)
    metrics.enable_metrics(store, store_name="test")
    try:
        yield store
    finally:
        metrics.disable_metrics()
        store.close()


def _scraped() -> Any:
    return samples(metrics.render().decode())


async def test_a_model_that_always_fails_counts_one_failed_run(
    enabled: nd.SqliteSessionStore,
) -> None:
    model = nd.ScriptedModel(["never"], fail_on=[1])
    agent = Agent("doomed", model, version="1")
    async with await DurableRuntime.open(store=enabled, agents=[agent]) as rt:
        run = await rt.submit("doomed", "go")
        with pytest.raises(RunFailedError) as caught:
            await asyncio.wait_for(run.result(), 30)
    assert caught.value.reason == "model_error"
    scraped = _scraped()
    assert value(scraped, "nbdurable_runs_failed_total", agent="doomed") == 1
    assert value(scraped, "nbdurable_runs_failed_total", reason="model_error") == 1
    assert value(scraped, "nbdurable_runs_finished_total", agent="doomed", state="failed") == 1
    assert value(scraped, "nbdurable_model_call_seconds_count", outcome="error") == 1
    assert value(scraped, "nbdurable_model_retries_total") == 0
    assert value(scraped, "nbdurable_store_runs", store="test", state="failed") == 1


async def test_a_flaky_model_retried_once_counts_one_model_retry(
    enabled: nd.SqliteSessionStore,
) -> None:
    model = nd.ScriptedModel(["ok"] * 3, mode="sequential", fail_on=[1])
    agent = Agent("flaky", model, version="1", model_retry=FAST)
    async with await DurableRuntime.open(store=enabled, agents=[agent]) as rt:
        run = await rt.submit("flaky", "go")
        assert (await asyncio.wait_for(run.result(), 30)).text == "ok"
    assert model.calls == 2
    scraped = _scraped()
    assert value(scraped, "nbdurable_model_retries_total", agent="flaky") == 1
    assert value(scraped, "nbdurable_model_call_seconds_count", agent="flaky") == 2
    assert value(scraped, "nbdurable_runs_failed_total") == 0
    assert value(scraped, "nbdurable_runs_finished_total", agent="flaky", state="completed") == 1
    assert value(scraped, "nbdurable_runs_started_total", agent="flaky") == 2  # two legs


async def test_runs_are_counted_by_the_model_of_their_agent(
    enabled: nd.SqliteSessionStore,
) -> None:
    small = Agent("small", nd.ScriptedModel(["ok"], model_id="mini-1"), version="1")
    large = Agent("large", nd.ScriptedModel(["ok"], model_id="large-2"), version="1")
    doomed = Agent("doomed", nd.ScriptedModel(["x"], fail_on=[1], model_id="large-2"), version="1")
    async with await DurableRuntime.open(store=enabled, agents=[small, large, doomed]) as rt:
        runs = [await rt.submit(agent, "go") for agent in ("small", "large", "large", "doomed")]
        for run in runs:
            await asyncio.wait_for(run.wait(), 30)
    scraped = _scraped()
    finished = "nbdurable_runs_finished_total"
    assert value(scraped, finished, model="mini-1", state="completed") == 1
    assert value(scraped, finished, model="large-2", state="completed") == 2
    assert value(scraped, finished, model="large-2", agent="doomed", state="failed") == 1
    assert value(scraped, "nbdurable_runs_failed_total", model="large-2") == 1
    assert value(scraped, "nbdurable_runs_started_total", model="large-2") == 3
    # the model counters and the run counters name the model alike
    assert value(scraped, "nbdurable_model_calls_total", model="mini-1") == 1


async def test_a_store_write_lock_held_by_another_process_counts_store_errors(
    enabled: nd.SqliteSessionStore, tmp_path: Path
) -> None:
    """Another process holds the write lock 1.5 s (past the 0.1 s busy_timeout) while the
    run records its tool call: the retried store calls are counted, the run completes."""
    holders = []

    @nd.tool
    async def step(n: int) -> str:
        """Do a step."""
        if not holders:
            holders.append(await asyncio.to_thread(hold_write_lock, tmp_path / "runs.db", 1.5))
        return f"step {n} done"

    agent = Agent(
        "outage",
        nd.ScriptedModel([nd.Turn.call("step", n=1), "done"]),
        [step],
        version="1",
        tool_recovery={"step": "safe"},
    )
    assert value(_scraped(), "nbdurable_store_errors_total") == 0
    try:
        async with await DurableRuntime.open(
            store=enabled, agents=[agent], store_retry_ms=30_000
        ) as rt:
            run = await rt.submit("outage", "go")
            assert (await asyncio.wait_for(run.result(), 60)).text == "done"
    finally:
        for holder in holders:
            holder.wait(timeout=10)
    assert len(holders) == 1
    scraped = _scraped()
    errors = [(labels, v) for n, labels, v in scraped if n == "nbdurable_store_errors_total"]
    assert sum(v for _, v in errors) >= 1, errors
    assert all(labels["operation"] for labels, _ in errors)
    assert value(scraped, "nbdurable_runs_failed_total") == 0


async def test_a_worker_paused_past_its_lease_counts_one_lost_lease(tmp_path: Path) -> None:
    """A worker is SIGSTOPped inside a long tool past its lease; another worker claims the
    run; woken, the first finds its lease gone at its next renewal and counts it."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=lease_agents.agents)  # submits only
    run = await client.submit("long", "work")
    first = lease_worker(url, log, "--metrics-port", "0", lease_ms=1000, tool_seconds=120)
    second = None
    try:
        base = metrics_base(first)
        await wait_for(lambda: lease_agents.starts(log), 60, "the first worker's tool")
        await wait_for(
            lambda: value(scrape(base), "nbdurable_lease_renewals_total") >= 1, 60, "a renewal"
        )
        assert value(scrape(base), "nbdurable_leases_lost_total") == 0
        owner = run.record().lease_owner
        await pause_outside_writes(first, url)
        second = lease_worker(url, log, lease_ms=1000, tool_seconds=120)
        await wait_for(lambda: run.record().fence == 2, 60, "the second worker's claim")
        assert run.record().lease_owner not in (None, owner)
        first.send_signal(signal.SIGCONT)
        await wait_for(
            lambda: value(scrape(base), "nbdurable_leases_lost_total") >= 1, 60, "a lost lease"
        )
        await asyncio.sleep(0.7)  # two renewal periods: a second renewal would count again
        scraped = scrape(base)
        assert value(scraped, "nbdurable_leases_lost_total") == 1
        assert value(scraped, "nbdurable_takeovers_total") == 0
        assert run.record().fence == 2 and run.record().lease_owner != owner
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.kill()
                proc.communicate(timeout=30)
        store.close()


STORE_GAUGES = {"nbdurable_store_up", "nbdurable_store_runs", "nbdurable_store_approvals_pending"}


def test_no_store_gauges_leaves_the_store_wide_gauges_out_of_a_scrape(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    without = worker(url, None, "--metrics-port", "0", "--no-store-gauges", lease_ms=30_000)
    default = worker(url, None, "--metrics-port", "0", lease_ms=30_000)
    try:
        bare = get(f"{metrics_base(without)}/metrics")[1]
        full = get(f"{metrics_base(default)}/metrics")[1]
    finally:
        for proc in (without, default):
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
    assert families(full) >= STORE_GAUGES
    assert not STORE_GAUGES & families(bare)
    # the per-process families are there all the same
    assert {"nbdurable_runs_started", "nbdurable_leases_lost"} <= families(bare)
    assert value(samples(full), "nbdurable_store_up") == 1


@nd.tool(needs_approval=True, allow_edit=True)
def drop(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


async def test_decision_times_are_labelled_with_the_verdicts_kind(
    enabled: nd.SqliteSessionStore,
) -> None:
    """Approved, edited, denied and replied verdicts are four label values, not two."""
    model = nd.ScriptedModel([nd.Turn.call("drop", name="stg"), "done"])
    agent = Agent("gated", model, [drop], version="1")
    async with await DurableRuntime.open(store=enabled, agents=[agent]) as rt:
        runs = [await rt.submit("gated", f"Clean up {i}.", session_id=f"s{i}") for i in range(4)]
        for run in runs:
            await run.wait("waiting_approval", timeout=30)
        requests = [(await run.pending_approvals())[0] for run in runs]
        await runs[0].approve(requests[0].approval_id)
        await runs[1].approve(requests[1].approval_id, arguments={"name": "stg_2023"})
        await runs[2].deny(requests[2].approval_id, reason="no")
        await runs[3].respond(requests[3].approval_id, "use the staging table instead")
        for run in runs:
            await asyncio.wait_for(run.result(), 30)
    scraped = _scraped()
    for kind in ("approved", "edited", "denied", "replied"):
        assert value(scraped, "nbdurable_approval_decision_seconds_count", verdict=kind) == 1
