"""Runs on Pydantic AI and LangChain models survive a SIGKILL: a worker process streams the
first turn and parks the run on an approval, is killed, and another worker process resumes it."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path

import pytest
from support import runtime_harness

pytest.importorskip("pydantic_ai")
pytest.importorskip("langchain_core")

import nbdurable as nd
from nbdurable.runtime import DurableRuntime

from . import interop_agents
from .interop_agents import ANSWER, CALL_ID, PRICE

HERE = Path(__file__).resolve().parent


def worker(url: str, log: Path, *extra: str) -> subprocess.Popen[str]:
    """`nbdurable worker` serving tests/models/interop_agents.py, in its own process."""
    return runtime_harness.worker(url, log, *extra, agents="interop_agents:agents", path=HERE)


def executions(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("framework", list(interop_agents.MODELS))
async def test_a_run_parked_on_approval_survives_sigkill_and_resumes_in_another_process(
    tmp_path: Path, framework: str
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    log = tmp_path / "executions.log"
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=interop_agents.agents)  # submits and watches
    first = worker(url, log)
    try:
        run = await client.submit(f"janitor-{framework}", "Drop the stale staging tables.")
        await asyncio.wait_for(run.wait("waiting_approval"), 60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    assert first.returncode == -signal.SIGKILL
    [request] = await run.pending_approvals()
    assert (request.tool_call_id, request.tool_name) == (CALL_ID, "drop_table")
    assert request.input == {"name": "stg_2023"} and request.token
    assert executions(log) == []  # nothing ran before the verdict

    await run.approve(request.approval_id)
    second = worker(url, log, "--exit-when-idle")
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert run.status == "completed"

    result = await run.result()
    assert result.text == ANSWER
    assert executions(log) == [f"drop {run.run_id} {CALL_ID}"]  # once, after the approval
    messages = store.load(run.run_id).messages  # type: ignore[union-attr]
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2].tool_results[0].result == "dropped stg_2023"
    # usage of both model calls (one per process), priced from the adapter's price
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    expected = nd.models.cost_of(result.usage, PRICE)
    assert result.usage.cost == pytest.approx(expected)
    # the agents stream: the resumed leg's answer arrived as deltas, persisted in the log
    events = await nd.read_events(store, run.run_id)
    deltas = [str(e.payload.get("delta", "")) for e in events if e.type == "model_delta"]
    assert ANSWER in "".join(deltas)
    store.close()  # type: ignore[attr-defined]
