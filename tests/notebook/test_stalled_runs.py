"""A run whose owner died (SIGKILL, lease run out) is shown as stalled, not "running".

A real worker process runs the run; the test SIGKILLs it mid-tool and lets its
short lease run out. Then every notebook view tells the truth: the reason in
``%durable runs``, the dashboard's row (its own status and the "needs a look"
filter), and the run widget's badge and summary.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest
from support import runtime_agents
from support.runtime_harness import executions, worker

import nbdurable as nd
from nbdurable.inspect import _records
from nbdurable.notebook import NotebookSession
from nbdurable.notebook.widgets import RunWidget
from nbdurable.notebook.widgets._dashboard_rows import Query, page_of, run_rows
from nbdurable.runs import STALLED, stalled
from nbdurable.runtime import DurableRuntime

from .conftest import Shown
from .widget_fixtures import comms_fixture, eventually  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def _orphaned(url: str, log: Path) -> str:
    """A sleeper run whose worker was SIGKILLed inside its slow tool; its lease ran out."""
    store = nd.open_store(url)
    client = DurableRuntime(store=store, agents=runtime_agents.agents)  # submits, never runs
    run = await client.submit("sleeper", "sleep")
    proc = worker(url, log, lease_ms=300)
    try:
        while not executions(log):  # the owner is inside the slow tool
            await asyncio.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    await asyncio.sleep(0.5)  # the 300 ms lease runs out
    record = run.record()
    assert record.state == "running" and record.lease_owner  # the record still says running
    store.close()
    return run.run_id


async def test_an_owner_killed_run_is_stalled_in_every_view(
    tmp_path: Path,
    ip: Any,
    nb: NotebookSession,
    magic: Any,
    views: list[Shown],
    comms: list[Any],
) -> None:
    url = f"sqlite:///{tmp_path}/.nbdurable/runs.db"
    (tmp_path / ".nbdurable").mkdir()
    run_id = await _orphaned(url, tmp_path / "executions.log")
    store: Any = nd.open_store(url)
    record = store.rt_get(run_id)
    found = stalled(record)
    assert found is not None and found.gone  # SIGKILLed on this host: known gone
    text = found.text()
    assert text.startswith("owner gone, lease expired ")
    assert text.endswith("ago; a runtime or worker serving sleeper v1 will take it over")

    # %durable runs: the reason column says it
    runs = magic("durable", "runs").value
    assert runs.loc[run_id, "status"] == "running"
    assert runs.loc[run_id, "reason"].startswith("owner gone, lease expired ")

    # the dashboard: its own status, and in the "needs a look" filter
    rows = run_rows(*_records.run_rows(store))
    assert [r.status for r in rows] == [STALLED]
    assert rows[0].cells["reason"].startswith("owner gone")
    attention = page_of(rows, Query(status="attention"))
    assert [r["id"] for r in attention.rows] == [run_id]

    # the run widget (a kernel that does not serve sleeper): stalled badge, the reason
    async with await nd.DurableRuntime.open(store=store) as runtime:
        widget = RunWidget(runtime, run_id)
        await eventually(lambda: widget.stalled)
        assert widget.status == "running"  # the log's status; the view badges it stalled
        assert widget.summary.startswith("owner gone, lease expired ")
        widget.close()
    store.close()
