"""Graphs and tasks under SIGKILL with real worker processes (SQLite, PostgreSQL): the recovering
worker finishes them; completed nodes, completed phases and owned runs are not
executed again (issue 10)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from support import runtime_graph_agents
from support.runtime_harness import executions, worker

import nbdurable as nd
from nbdurable.runtime import DurableRuntime, GraphNode


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_database"))
    return f"sqlite:///{tmp_path / 'runs.db'}"


EXTRA = (
    "--agents",
    "support.runtime_graph_agents:agents",
    "--tasks",
    "support.runtime_graph_agents:tasks",
)


async def _until(log: Path, line: tuple[str, str, str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while line not in executions(log):
        assert time.monotonic() < deadline, f"{line} never logged"
        await asyncio.sleep(0.02)


async def test_a_worker_killed_mid_graph_another_finishes_it_without_rerunning_done_nodes(
    tmp_path: Path, url: str
) -> None:
    """SIGKILL while node b (after a) runs: a second worker finishes b and then c; a
    is not executed again (one claim, one tool run), c runs once with b's result."""
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=runtime_graph_agents.agents)
    graph = await client.submit_graph(
        [
            GraphNode("a", "stepper", "a 0.05"),
            GraphNode("b", "stepper", "b 2.0", depends_on=["a"]),
            GraphNode("c", "stepper", "c 0.05", depends_on=["b"]),
        ],
        graph_id="g",
    )
    first = worker(url, log, *EXTRA, lease_ms=400)
    await _until(log, ("step", "g:b", "b"))
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert graph.node("a").status == "completed" and graph.node("c").status == "queued"
    second = worker(url, log, *EXTRA, "--exit-when-idle", lease_ms=400)
    _out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert graph.status == "completed"
    counts = executions(log)
    assert counts[("step", "g:a", "a")] == 1 and counts[("step", "g:c", "c")] == 1
    assert counts[("step", "g:b", "b")] == 2  # interrupted mid-tool (safe): run again
    assert graph.node("a").record().fence == 1  # claimed once: never re-executed
    assert [i.step_index for i in store.history("g:a")] == [0, 1]
    assert "Result of b:\nb finished" in store.load("g:c").messages[0].text
    store.close()


async def test_a_worker_killed_mid_phase_another_resumes_that_phase(
    tmp_path: Path, url: str
) -> None:
    """SIGKILL inside a task's second phase: a second worker re-runs that phase from the
    first phase's checkpointed state; the first phase and its owned run are not run
    again; the task completes."""
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(
        store=store, agents=runtime_graph_agents.agents, tasks=runtime_graph_agents.tasks
    )
    run = await client.submit_task("report", {}, run_id="t1")
    first = worker(url, log, *EXTRA, lease_ms=400)
    await _until(log, ("phase", "t1", "slow"))
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert run.record().phase == 1  # gather's state is checkpointed
    second = worker(url, log, *EXTRA, "--exit-when-idle", lease_ms=400)
    _out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert await run.result() == {"gathered": "g finished", "slow": True, "done": True}
    counts = executions(log)
    assert counts[("phase", "t1", "gather")] == 1
    assert counts[("step", "t1:gather:0", "g")] == 1  # the owned run ran once
    assert counts[("phase", "t1", "slow")] == 2  # the interrupted phase ran again
    assert counts[("phase", "t1", "finish")] == 1
    assert run.record().fence == 2
    store.close()
