"""MCP tools in the runtime: approval-gated calls, one session per server closed with the
runtime, and worker processes that crash mid-call or resume a run and reconnect."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import pytest
from support import runtime_harness

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime

from . import mcp_agents
from .conftest import HERE, HttpServer, log_lines, stdio


def worker(url: str, mcp_url: str, *extra: str, lease_ms: int = 300) -> subprocess.Popen[str]:
    """`nbdurable worker` serving tests/interop/mcp_agents.py against the HTTP server.

    The killed worker's short lease lets the next worker take its run over at
    once; a finishing worker gets a long one (:func:`finisher`), so a loaded
    machine that starves it past 300 ms does not make it lose its own run.
    """
    return runtime_harness.worker(
        url,
        None,
        *extra,
        lease_ms=lease_ms,
        agents="mcp_agents:agents",
        path=HERE,
        env={"MCP_TEST_URL": mcp_url},
    )


def finisher(url: str, mcp_url: str) -> subprocess.Popen[str]:
    """A worker that finishes what waits and exits, on a lease no stall outlasts."""
    return worker(url, mcp_url, "--exit-when-idle", lease_ms=10_000)


def finish(proc: subprocess.Popen[str]) -> None:
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


async def wait_for_lines(log: Path, count: int, timeout: float = 60) -> None:
    for _ in range(int(timeout / 0.02)):
        if len(log_lines(log)) >= count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the MCP server logged {log_lines(log)}, wanted {count} lines")


def release(gate: Path) -> None:
    """Let the server's slow upsert return."""
    gate.touch()


def process_gone(pid: int) -> bool:
    """True when the process no longer exists (a zombie still would: it was not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_an_approval_gated_mcp_call_suspends_and_runs_once_approved(
    tmp_path: Path, mcp_log: Path, mcp_gate: Path
) -> None:
    server = stdio(mcp_log, mcp_gate)  # untrusted: every tool needs approval
    tools = await server.tools(include=["delete", "server_pid"])
    await server.close()
    script = nd.ScriptedModel(
        [nd.Turn.call("delete", key="k1"), nd.Turn.call("delete", key="k2"), "done"]
    )
    agent = Agent("janitor", script, tools, version="1")
    async with await DurableRuntime.open(
        store=nd.open_store(f"sqlite:///{tmp_path}/runs.db"), agents=[agent]
    ) as runtime:
        run = await runtime.submit("janitor", "clean up")
        await run.wait("waiting_approval", timeout=60)
        assert log_lines(mcp_log) == []  # nothing ran before the verdict
        await run.approve()
        await run.wait("waiting_approval", timeout=60)  # the second call asks again
        await run.deny(reason="k2 stays")
        record = await run.wait("completed", timeout=60)
        assert record.state == "completed"
        calls = log_lines(mcp_log)
        assert len(calls) == 1 and calls[0][0] == "delete" and calls[0][2] == "k1"
        assert calls[0][1].startswith(f"{run.run_id}:")  # the run's idempotency key
        messages = runtime.store.load(run.run_id).messages
        results = [p for m in messages for p in m.content if isinstance(p, nd.ToolResultPart)]
        assert [r.is_error for r in results] == [False, True]
        assert results[0].result == {"result": "deleted k1"}
        assert results[1].result == "k2 stays"


async def test_a_runtime_keeps_one_session_per_server_and_reaps_it_on_close(
    tmp_path: Path, mcp_log: Path, mcp_gate: Path
) -> None:
    server = stdio(mcp_log, mcp_gate, trusted=True)
    tools = await server.tools(include=["server_pid", "add"])
    await server.close()
    script = nd.ScriptedModel(
        [nd.Turn(tool_calls=[("server_pid", {}), ("add", {"a": 1, "b": 2})]), "done"]
    )
    agent = Agent("prober", script, tools, version="1", tool_recovery={"add": "idempotent"})
    assert agent.recovery_of("server_pid") == "safe"  # from the annotations
    assert agent.recovery_of("add") == "idempotent"  # the agent's setting wins
    runtime = await DurableRuntime.open(
        store=nd.open_store(f"sqlite:///{tmp_path}/runs.db"), agents=[agent]
    )
    try:
        runs = [await runtime.submit("prober", f"probe {i}") for i in range(3)]
        pids = set()
        for run in runs:
            await run.wait("completed", timeout=60)
            messages = runtime.store.load(run.run_id).messages
            pids |= {
                p.result["result"]
                for m in messages
                for p in m.content
                if isinstance(p, nd.ToolResultPart) and p.tool_name == "server_pid"
            }
        assert len(pids) == 1  # three runs, parallel calls: one session, one server process
        connection = runtime.resources.peek(("mcp", server))
        assert connection is not None and connection.opened == 1
        (pid,) = pids
        assert not process_gone(pid)
    finally:
        await runtime.close()
    assert process_gone(pid)  # stopped and reaped, not a zombie
    assert runtime.resources.peek(("mcp", server)) is None


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


async def test_a_worker_killed_mid_call_reruns_an_idempotent_mcp_tool_with_the_same_key(
    store_url: str, http_server: HttpServer, mcp_gate: Path
) -> None:
    store = nd.open_store(store_url)
    client = DurableRuntime(store=store, agents=mcp_agents.agents(http_server.url))
    run = await client.submit("mcp_upsert_idempotent", "store it")
    first = worker(store_url, http_server.url)
    await wait_for_lines(http_server.log, 1)  # the call is in flight on the server
    first.send_signal(signal.SIGKILL)
    first.wait()
    release(mcp_gate)  # the server may answer now; the first caller is gone
    finish(finisher(store_url, http_server.url))
    assert run.status == "completed"
    calls = log_lines(http_server.log)
    assert len(calls) == 2 and calls[0] == calls[1]  # re-run once, same idempotency key
    assert calls[0][1].startswith(f"{run.run_id}:")
    store.close()


async def test_a_worker_killed_mid_call_parks_a_manual_mcp_tool_until_retry(
    store_url: str, http_server: HttpServer, mcp_gate: Path
) -> None:
    store = nd.open_store(store_url)
    client = DurableRuntime(store=store, agents=mcp_agents.agents(http_server.url))
    run = await client.submit("mcp_upsert_manual", "store it")
    first = worker(store_url, http_server.url)
    await wait_for_lines(http_server.log, 1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    release(mcp_gate)
    finish(finisher(store_url, http_server.url))
    assert run.status == "needs_attention"
    assert len(log_lines(http_server.log)) == 1  # never re-run by itself
    await run.retry()
    finish(finisher(store_url, http_server.url))
    assert run.status == "completed"
    assert len(log_lines(http_server.log)) == 2
    store.close()


async def test_a_run_approved_after_its_worker_stopped_resumes_on_another_worker(
    store_url: str, http_server: HttpServer
) -> None:
    store = nd.open_store(store_url)
    client = DurableRuntime(store=store, agents=mcp_agents.agents(http_server.url))
    run = await client.submit("mcp_delete", "delete k1")
    finish(finisher(store_url, http_server.url))  # stops at the approval
    assert run.status == "waiting_approval"
    assert log_lines(http_server.log) == []
    await run.approve()
    finish(finisher(store_url, http_server.url))  # a new process, a new session
    assert run.status == "completed"
    calls = log_lines(http_server.log)
    assert len(calls) == 1 and calls[0][0] == "delete" and calls[0][1].startswith(run.run_id)
    store.close()
