"""A worker's lifecycle log lines carry the run's trace id: JSON fields and text lines alike."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from support.runtime_harness import worker

import nbdurable as nd
from nbdurable import tracing
from nbdurable.cli._logs import JsonFormatter, TextFormatter
from nbdurable.runtime import DurableRuntime

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


async def _submit_traced(url: str, session_id: str) -> str:
    """Submit a run of ``single`` as a caller with ``TRACEPARENT`` would; its run id."""
    from support import runtime_agents

    store = nd.open_store(url)
    try:
        client = DurableRuntime(store=store, agents=runtime_agents.agents)  # submits only
        with tracing.incoming_trace_context(TRACEPARENT):
            run = await client.submit("single", "probe", session_id=session_id)
        assert (run.record().trace_context or {})["traceparent"] == TRACEPARENT
        return run.run_id
    finally:
        store.close()


async def _untraced(url: str) -> str:
    """Submit a run of ``single`` with no trace context (another session); its run id."""
    from support import runtime_agents

    store = nd.open_store(url)
    try:
        client = DurableRuntime(store=store, agents=runtime_agents.agents)
        run = await client.submit("single", "probe", session_id="untraced")
        assert run.record().trace_context is None
        return run.run_id
    finally:
        store.close()


def _drain(url: str, log: Path, log_format: str) -> str:
    """Run a worker until it is idle; what it wrote to stderr."""
    proc = worker(url, log, "--exit-when-idle", "--log-format", log_format)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return err


async def test_json_lines_of_a_traced_run_carry_its_trace_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run_id = await _submit_traced(url, "json")
    untraced = await _untraced(url)
    err = _drain(url, tmp_path / "log", "json")
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    mine = [line for line in lines if line.get("run_id") == run_id]
    assert {line["event"] for line in mine} >= {"claimed", "finished"}, err
    assert {line["trace_id"] for line in mine} == {TRACE_ID}
    other = [line for line in lines if line.get("run_id") == untraced]
    assert other and all("trace_id" not in line for line in other), err


async def test_text_lines_of_a_traced_run_show_its_trace_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run_id = await _submit_traced(url, "text")
    untraced = await _untraced(url)
    err = _drain(url, tmp_path / "log", "text")
    mine = [line for line in err.splitlines() if f"run {run_id} " in line]
    assert any("claimed" in line for line in mine), err
    assert any("finished: completed" in line for line in mine), err
    assert all(line.endswith(f" trace_id={TRACE_ID}") for line in mine), err
    other = [line for line in err.splitlines() if f"run {untraced} " in line]
    assert other and all("trace_id=" not in line for line in other), err


def test_the_text_format_puts_the_trace_id_before_a_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "nbdurable.runs", logging.ERROR, __file__, 1, "run r1 failed", (), sys.exc_info()
        )
    record.trace_id = TRACE_ID
    first, *rest = TextFormatter().format(record).splitlines()
    assert first.endswith(f"ERROR nbdurable.runs: run r1 failed trace_id={TRACE_ID}")
    assert rest[0].startswith("Traceback") and rest[-1] == "ValueError: boom"
    assert json.loads(JsonFormatter().format(record))["trace_id"] == TRACE_ID
