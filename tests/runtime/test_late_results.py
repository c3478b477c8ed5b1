"""A paused worker's late effect is kept and shown, with real worker processes (SQLite, PostgreSQL).

A worker is paused (SIGSTOP) past its lease inside a ``manual`` tool that does
not check ``ctx.ensure_owner()``; another worker takes the run over and parks it
in ``needs_attention``. Woken (SIGCONT), the paused worker finishes the tool:
its effect happened, and its fenced writes are refused. That outcome is kept on
the run (the record's ``late_results`` and a ``tool_late_result`` event), shown
by ``explain``, ``nbdurable runs show`` and before ``nbdurable runs retry``
runs the call again, and can settle the call instead of a second run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import lease_agents
from support.lease_harness import pause_outside_writes, wait_for, worker

import nbdurable as nd
from nbdurable.runtime import DurableRuntime, use_late_result

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_database"))
    return f"sqlite:///{tmp_path / 'runs.db'}"


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "nbdurable.cli", "runs", *args, "--store", url],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


async def _paused_and_taken_over(
    url: str, log: Path, agent: str = "blocking", pause_after: float = 0.0
) -> tuple[str, int]:
    """A run whose worker was paused mid-tool, taken over, then woken; (run, paused pid)."""
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=lease_agents.agents)
    run = await client.submit(agent, "pay once")
    paused = worker(url, log, "--max-concurrent-runs", "1", tool_seconds=2.0)
    try:
        await wait_for(lambda: paused.pid in lease_agents.starts(log), 60, "the first start")
        await asyncio.sleep(pause_after)
        await pause_outside_writes(paused, url)
        taker = worker(url, log, "--exit-when-idle")
        taker.communicate(timeout=60)
        assert run.record().state == "needs_attention"
        assert run.record().late_results == []  # the paused worker has not woken yet
        paused.send_signal(signal.SIGCONT)
        await wait_for(lambda: store.rt_get(run.run_id).late_results, 30, "a late result")
    finally:
        paused.send_signal(signal.SIGCONT)
        paused.send_signal(signal.SIGTERM)
        _out, err = paused.communicate(timeout=60)
    assert "Traceback" not in err, err
    store.close()
    return run.run_id, paused.pid


async def test_a_woken_workers_late_result_is_kept_shown_and_can_settle_the_call(
    tmp_path: Path, url: str
) -> None:
    log = tmp_path / "log"
    run_id, pid = await _paused_and_taken_over(url, log)
    assert lease_agents.effects(log)[run_id] == 1  # the paused worker's effect happened
    store = nd.open_store(url)
    record = store.rt_get(run_id)
    [late] = record.late_results
    assert (late.tool_call_id, late.tool_name, late.step_index) == ("call_1_0", "pay_blocking", 0)
    assert late.outcome == "result" and late.result is not None
    assert late.result["result"] == f"paid 5 by {pid}" and not late.result["is_error"]
    assert late.fence == 1 and record.fence == 2  # the stale owner's token; the run's is newer
    assert late.owner is not None and f":{pid}#" in late.owner
    # nothing else changed: still waiting for the human, the call still interrupted
    assert record.state == "needs_attention" and "may have run twice" in (record.reason or "")
    [intent] = store.rt_intents(run_id)
    assert intent.state == "started"
    events = await nd.read_events(store, run_id)
    [event] = [e for e in events if e.type == nd.events.TOOL_LATE_RESULT]
    assert event.payload == late.model_dump(mode="json") and event.step_index == 0

    # explain: the late result comes before the next steps that would run the call again
    explained = str(nd.inspect.explain(store, run_id, context="terminal"))
    assert f"paid 5 by {pid}" in explained and "already ran once" in explained
    assert explained.index("already ran once") < explained.index("Next:")
    assert "--use-late-result" in explained

    # `runs show` says it; `runs retry` refuses to run the call again blind
    shown = _cli(url, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "late result" in shown.stdout and f"paid 5 by {pid}" in shown.stdout
    as_json = json.loads(_cli(url, "show", run_id, "--json").stdout)
    assert as_json["run"]["late_results"] == [late.model_dump(mode="json")]
    refused = _cli(url, "retry", run_id)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "already ran once" in refused.stderr and "--rerun" in refused.stderr
    assert store.rt_get(run_id).state == "needs_attention"  # nothing was retried

    # settle the call with the late result: the run completes, the tool never runs again
    used = _cli(url, "retry", run_id, "--use-late-result")
    assert used.returncode == 0, used.stdout + used.stderr
    assert store.rt_get(run_id).state == "pending"
    finisher = worker(url, log, "--exit-when-idle")
    finisher.communicate(timeout=60)
    assert store.rt_get(run_id).state == "completed"
    assert lease_agents.effects(log)[run_id] == 1
    checkpoint = store.load(run_id)
    assert checkpoint is not None
    assert checkpoint.messages[2].tool_results[0].result == f"paid 5 by {pid}"
    store.close()


async def test_retry_after_a_late_result_runs_the_call_again_only_when_asked(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "log"
    run_id, _pid = await _paused_and_taken_over(url, log)
    rerun = _cli(url, "retry", run_id, "--rerun")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "already ran once" in rerun.stdout  # said, even when asked for
    finisher = worker(url, log, "--exit-when-idle")
    finisher.communicate(timeout=60)
    store = nd.open_store(url)
    assert store.rt_get(run_id).state == "completed"
    assert lease_agents.effects(log)[run_id] == 2  # the human chose to run it twice
    store.close()


async def test_use_late_result_from_python(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "log"
    run_id, pid = await _paused_and_taken_over(url, log)
    store = nd.open_store(url)
    async with await DurableRuntime.open(store=store, agents=lease_agents.agents) as runtime:
        run = await runtime.get_run(run_id)
        with pytest.raises(nd.ConfigurationError, match="has no late result"):
            await use_late_result(run, "call_9_9")
        # Run.retry() does not run the call again blind: it names both ways out
        with pytest.raises(nd.ConfigurationError, match=r"run\.use_late_result\(\)") as refused:
            await run.retry()
        assert "run.retry(rerun=True)" in str(refused.value)
        assert run.record().state == "needs_attention"
        late = await run.use_late_result()
        assert late.result is not None and late.result["result"] == f"paid 5 by {pid}"
        result = await asyncio.wait_for(run.result(), 60)
    assert result.text == "paid"
    assert lease_agents.effects(log)[run_id] == 1
    store.close()


@pytest.mark.parametrize("agent", ["careless", "careless_threaded"])
async def test_a_paused_workers_call_is_never_invisible(
    tmp_path: Path, url: str, agent: str
) -> None:
    """Whichever wins on waking, the tool or the lease keeper, the human learns the call ran.

    An async tool stopped at its ``await`` by the keeper never acts, and is kept
    as ``cut_off``; one that finished first is kept with its result; a tool in a
    thread goes on after the keeper stopped its caller, so it is kept as
    ``cut_off`` while its effect happens.
    """
    log = tmp_path / "log"
    run_id, pid = await _paused_and_taken_over(url, log, agent)
    store = nd.open_store(url)
    record = store.rt_get(run_id)
    assert record.late_results, "the paused worker's call left no trace"
    for late in record.late_results:
        assert late.owner is not None and f":{pid}#" in late.owner and late.fence == 1
        if late.outcome == "result":
            assert late.result is not None and late.result["result"] == f"paid 5 by {pid}"
    if any(late.outcome == "result" for late in record.late_results):
        assert lease_agents.effects(log)[run_id] == 1
    explained = str(nd.inspect.explain(store, run_id))
    assert explained.index(f"pid {pid} ") < explained.index("Next:")
    store.close()
