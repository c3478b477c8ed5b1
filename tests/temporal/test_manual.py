"""A manual tool interrupted by a SIGKILLed worker, retried from the CLI with no client open.

Retry and deny from a client, on every engine: tests/engines/test_recovery.py.
"""

from __future__ import annotations

import asyncio
import sys
from subprocess import PIPE, STDOUT

from support.executions import started, tool_rows

from nbdurable.runtime import DurableRuntime, Run

from .conftest import Cluster


async def _interrupted(cluster: Cluster, rt: DurableRuntime) -> Run:
    """Submit the manual agent, SIGKILL its worker mid-tool; the run in needs_attention."""
    tools = cluster.tools
    first = cluster.worker(slow=30)
    run = await rt.submit("careful", "Do the manual step.")
    await started(tools)
    first.kill()
    cluster.worker(slow=0.1)
    record = await asyncio.wait_for(run.wait("needs_attention", "completed", "failed"), 60)
    assert record.state == "needs_attention", record
    assert record.reason is not None and "slow_manual" in record.reason
    assert len(tool_rows(tools)) == 1  # a manual tool is not re-run on its own
    return run


async def test_retry_from_the_cli_with_no_client_connected(cluster: Cluster) -> None:
    """A parked workflow gets its resume from a worker when no client engine is open."""
    tools, store = cluster.tools, cluster.store
    async with cluster.runtime(heartbeat_timeout=1.5) as rt:
        run = await _interrupted(cluster, rt)
    command = [sys.executable, "-m", "nbdurable.cli", "runs", "retry", run.run_id]
    command += ["--store", cluster.url]
    cli = await asyncio.create_subprocess_exec(*command, stdout=PIPE, stderr=STDOUT)
    output, _ = await asyncio.wait_for(cli.communicate(), 60)
    assert cli.returncode == 0, output.decode()
    plain = DurableRuntime(store=store)  # no engine runs here: only the workers act
    record = await asyncio.wait_for(Run(plain, run.run_id).wait(), 60)
    assert record.state == "completed", record
    assert [tool for tool, _ in tool_rows(tools)] == ["slow_manual", "slow_manual"]
