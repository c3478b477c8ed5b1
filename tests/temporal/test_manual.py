"""A manual tool interrupted by a SIGKILLed worker: needs_attention, then retry() or deny()."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from subprocess import PIPE, STDOUT
from typing import Any

import temporal_agents

import nbdurable as nd
from nbdurable.runtime import DurableRuntime, Run
from nbdurable.temporal import TemporalEngine

from .executions import started, tool_rows


async def _interrupted(
    start_worker: Any, rt: DurableRuntime, queue: str, tools: Path, url: str
) -> Run:
    """Submit the manual agent, SIGKILL its worker mid-tool; the run in needs_attention."""
    first = start_worker(queue, url, NBDURABLE_TEST_TOOLS=str(tools), NBDURABLE_TEST_SLOW="30")
    run = await rt.submit("careful", "Do the manual step.")
    await started(tools)
    first.kill()
    start_worker(queue, url, NBDURABLE_TEST_TOOLS=str(tools), NBDURABLE_TEST_SLOW="0.1")
    record = await asyncio.wait_for(run.wait("needs_attention", "completed", "failed"), 60)
    assert record.state == "needs_attention", record
    assert record.reason is not None and "slow_manual" in record.reason
    assert len(tool_rows(tools)) == 1  # a manual tool is not re-run on its own
    return run


async def test_manual_tool_interrupted_then_retry_runs_it_once(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    tools = tmp_path / "tools.db"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    engine = TemporalEngine(address=temporal_server, task_queue=queue, heartbeat_timeout=1.5)
    store = nd.open_store(url)
    async with DurableRuntime(store=store, agents=temporal_agents.agents, engine=engine) as rt:
        run = await _interrupted(start_worker, rt, queue, tools, url)
        await run.retry()
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Manual step settled."
    assert [tool for tool, _ in tool_rows(tools)] == ["slow_manual", "slow_manual"]
    assert run.record().rerun_tool_calls == []


async def test_manual_tool_interrupted_then_deny_settles_it(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    tools = tmp_path / "tools.db"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    engine = TemporalEngine(address=temporal_server, task_queue=queue, heartbeat_timeout=1.5)
    store = nd.open_store(url)
    async with DurableRuntime(store=store, agents=temporal_agents.agents, engine=engine) as rt:
        run = await _interrupted(start_worker, rt, queue, tools, url)
        await run.deny(reason="An operator checked: not done, do not redo.")
        result = await asyncio.wait_for(run.result(), 30)
        assert result.text == "Manual step settled."
        denied = [
            part
            for message in result.messages
            for part in message.content
            if isinstance(part, nd.ToolResultPart)
        ]
        assert len(denied) == 1 and denied[0].is_error
        assert denied[0].result == "An operator checked: not done, do not redo."
    assert len(tool_rows(tools)) == 1  # deny never re-runs the tool


async def test_retry_from_the_cli_with_no_client_connected(
    temporal_server: str, start_worker: Any, tmp_path: Path
) -> None:
    """A parked workflow gets its resume from a worker when no client engine is open."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    tools = tmp_path / "tools.db"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    engine = TemporalEngine(address=temporal_server, task_queue=queue, heartbeat_timeout=1.5)
    store = nd.open_store(url)
    async with DurableRuntime(store=store, agents=temporal_agents.agents, engine=engine) as rt:
        run = await _interrupted(start_worker, rt, queue, tools, url)
    command = [sys.executable, "-m", "nbdurable.cli", "runs", "retry", run.run_id, "--store", url]
    cli = await asyncio.create_subprocess_exec(*command, stdout=PIPE, stderr=STDOUT)
    output, _ = await asyncio.wait_for(cli.communicate(), 60)
    assert cli.returncode == 0, output.decode()
    plain = DurableRuntime(store=store)  # no engine runs here: only the workers act
    record = await asyncio.wait_for(Run(plain, run.run_id).wait(), 60)
    assert record.state == "completed", record
    assert [tool for tool, _ in tool_rows(tools)] == ["slow_manual", "slow_manual"]
