"""Worker loss and scale-out: SIGKILL mid-run, and two workers on one task queue."""

from __future__ import annotations

import asyncio

from support.executions import started, tool_counts, tool_rows

from .conftest import Cluster


async def test_sigkill_mid_run_then_a_second_worker_finishes(cluster: Cluster) -> None:
    tools = cluster.tools
    first = cluster.worker(slow=30)
    async with cluster.runtime(heartbeat_timeout=1.5) as rt:
        run = await rt.submit("crashy", "Do the three steps.")
        await started(tools, "slow_step")
        first.kill()  # SIGKILL while the slow step runs
        cluster.worker(slow=0.1)
        result = await asyncio.wait_for(run.result(), 60)
        assert result.text == "All three steps done."
    rows = tool_rows(tools)
    by_tool: dict[str, int] = {}
    for tool, _ in rows:
        by_tool[tool] = by_tool.get(tool, 0) + 1
    # completed steps never ran again; only the interrupted (safe) step ran twice
    assert by_tool == {"step": 2, "slow_step": 2}
    counts = tool_counts(tools)
    assert sorted(counts.values()) == [1, 1, 2]
    assert len({pid for _, pid in rows}) == 2


async def test_two_workers_fifty_runs_no_step_twice(cluster: Cluster) -> None:
    tools = cluster.tools
    cluster.worker()
    cluster.worker()
    async with cluster.runtime() as rt:
        runs = [await rt.submit("many", f"Run {i}.") for i in range(50)]
        results = await asyncio.wait_for(asyncio.gather(*(r.result() for r in runs)), 120)
    assert {r.text for r in results} == {"ok"}
    counts = tool_counts(tools)
    assert len(counts) == 100 and set(counts.values()) == {1}
    assert len({pid for _, pid in tool_rows(tools)}) == 2  # both workers took work
