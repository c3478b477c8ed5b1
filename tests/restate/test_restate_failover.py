"""Failover across two deployments registered with one server: the endpoint running a
leg is SIGKILLed mid-tool; the other, already running, takes its deployment over and
finishes the run (the interrupted ``safe`` step runs again, the completed one never)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.executions import started, tool_rows
from support.restate_server import restate_server as restate_server  # the fixture
from support.temporal_agents import agents as test_agents
from support.workers import Worker

import nbdurable as nd
from nbdurable.restate import RestateEngine, RestateServer
from nbdurable.runtime import DurableRuntime


async def test_the_other_deployment_finishes_a_run_whose_endpoint_died(
    restate_server: RestateServer, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = nd.open_store(url)
    tools = tmp_path / "tools.db"
    servers = (restate_server.ingress, restate_server.admin)
    env = {"NBDURABLE_TEST_TOOLS": str(tools), "NBDURABLE_TEST_SLOW": "4"}
    workers = [Worker(None, "", url, env, restate=servers) for _ in range(2)]
    try:
        engine = RestateEngine(*servers)
        async with DurableRuntime(store=store, agents=test_agents, engine=engine) as rt:
            run = await rt.submit("crashy", "Do the three steps.")
            await started(tools, "slow_step")
            (running,) = {pid for tool, pid in tool_rows(tools) if tool == "slow_step"}
            dying = next(w for w in workers if w.proc.pid == running)
            dying.kill()  # SIGKILL mid-tool; the survivor was registered before it died
            result = await asyncio.wait_for(run.result(), 90)
        assert result.text == "All three steps done."
        survivor = next(w for w in workers if w is not dying).proc.pid
        slow = [pid for tool, pid in tool_rows(tools) if tool == "slow_step"]
        assert slow == [running, survivor]
    finally:
        for worker in workers:
            worker.stop()
        store.close()
