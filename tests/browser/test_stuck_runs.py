"""The stuck-run story, solved from the notebook by clicking (JupyterLab and Notebook 7).

Another process (a kernel that died) left three runs in the notebook's store:

- ``w1`` waits for an approval, and no process serves its agent any more;
- ``b1`` and ``b2`` were in a ``manual`` tool call when their process was SIGKILLed;
- ``g1`` was in a retry-safe tool call when its process was SIGKILLed (its owner
  is gone, its record still says ``running``).

The notebook shows ``%durable dashboard``: ``b1`` and ``g1`` show as stalled (owner
gone), ``w1`` in the approvals. ``%durable resume g1`` imports ``g1``'s agent from
where its run records it lives (``stuck_agents:AGENTS``): ``g1`` is taken over and
completes. The agents' cell and ``%durable worker`` make this kernel serve the
others: ``b1`` and ``b2`` stop in
needs_attention (their call may have had an effect). **Approve** on ``w1`` resumes
it here; **Retry** on ``b1``'s line runs the call again; ``b2``'s run widget (a click
on its row) settles it with a reason: every run completes. Screenshots
``{jupyterlab,notebook7}-stuck-{dashboard,attention,settle,solved}.png``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .harness import Server
from .pages import LAB, NOTEBOOK7, Clock, Frontend, diagnosed, enabled, run_cell, shot

AGENTS = '''\
"""The agents of the stuck runs, importable by the process that dies and by the kernel."""
import asyncio
import os

import nbdurable as nd

DIES = os.environ.get("STUCK_DIES") == "1"


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a warehouse table."""
    return f"dropped {name}"


@nd.tool
async def charge(amount: int) -> str:
    """Charge a card (manual recovery: never twice without a human)."""
    if DIES:
        print("in charge", flush=True)
        await asyncio.Event().wait()
    return f"charged {amount}"


@nd.tool(recovery="safe")
async def fetch(table: str) -> int:
    """Count a table's rows (safe to run again)."""
    if DIES:
        print("in fetch", flush=True)
        await asyncio.Event().wait()
    return 42


def agents() -> list[nd.Agent]:
    drop = nd.ScriptedModel([nd.Turn.call("drop_table", "Dropping.", name="stg"), "Dropped."])
    bill = nd.ScriptedModel([nd.Turn.call("charge", "Charging.", amount=5), "Charged 5."])
    count = nd.ScriptedModel([nd.Turn.call("fetch", "Counting.", table="t"), "42 rows."])
    return [
        nd.Agent("janitor", drop, [drop_table], version="1"),
        nd.Agent("biller", bill, [charge], version="1"),
        nd.Agent("reporter", count, [fetch], version="1"),
    ]


AGENTS = agents()  # the runs record stuck_agents:AGENTS as where their agents live


async def die_stuck(url: str) -> None:
    runtime = await nd.DurableRuntime.open(store=nd.open_store(url), agents=AGENTS, lease_ms=1500)
    await runtime.submit("janitor", "Drop stg.", run_id="w1")
    await (await runtime.get_run("w1")).wait("waiting_approval")
    await runtime.submit("biller", "Charge 5.", run_id="b1")
    await runtime.submit("biller", "Charge 5.", run_id="b2")
    await runtime.submit("reporter", "Count t.", run_id="g1")
    await asyncio.Event().wait()  # SIGKILLed inside both tool calls
'''

SERVE = "import stuck_agents\njanitor, biller, reporter = stuck_agents.agents()\n%durable worker"


def die_with_stuck_runs(folder: Path) -> None:
    """Run the dying process in ``folder`` and SIGKILL it inside both tool calls."""
    (folder / "stuck_agents.py").write_text(AGENTS)
    (folder / ".nbdurable").mkdir()
    code = (
        "import asyncio, stuck_agents; "
        "asyncio.run(stuck_agents.die_stuck('sqlite:///.nbdurable/runs.db'))"
    )
    env = {**os.environ, "STUCK_DIES": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=folder, stdout=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        seen = sorted(proc.stdout.readline().strip() for _ in range(3))
        assert seen == [b"in charge", b"in charge", b"in fetch"], seen
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.parametrize("frontend", [LAB, NOTEBOOK7], ids=lambda f: f.name)
def test_stuck_runs_are_solved_from_the_dashboard_by_clicking(
    frontend: Frontend, jupyter: Server, page: Any, folder: Path
) -> None:
    import nbformat

    clock = Clock()
    die_with_stuck_runs(folder)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext nbdurable\n%durable dashboard"),
        nbformat.v4.new_code_cell("%durable resume g1"),
        nbformat.v4.new_code_cell(SERVE),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)"}
    nbformat.write(nb, folder / "stuck.ipynb")
    path = f"{folder.name}/stuck.ipynb"
    name = frontend.name
    with diagnosed(page, jupyter, f"{name}-stuck-runs"):
        frontend.open(page, jupyter, path)
        dash = run_cell(page, 0).locator(".nbd-dash")

        def row(run_id: str) -> Any:
            return dash.locator(f"tr.nbd-dash-row[data-run-id='{run_id}']")

        def badge(run_id: str) -> Any:
            return row(run_id).locator(".nbd-dash-badge")

        badge("g1").and_(dash.locator(".nbd-s-stalled")).wait_for(timeout=60_000)
        assert badge("b1").inner_text() == badge("b2").inner_text() == "stalled"
        assert "owner" in row("g1").locator(".nbd-c-reason").inner_text()
        approve = dash.locator(".nbd-dash-approval[data-approval-id] button.nbd-dash-approve")
        enabled(approve)
        clock("the dashboard shows the stuck runs")
        shot(page, f"{name}-stuck-dashboard.png")

        # no agent cell has run: resume imports g1's agent from where its run says it lives
        resumed = run_cell(page, 1).locator(".jp-OutputArea-output")
        resumed.filter(has_text="g1: ").first.wait_for(timeout=60_000)
        assert "needs agent" not in resumed.first.inner_text()
        badge("g1").and_(dash.locator(".nbd-s-completed")).wait_for(timeout=60_000)
        clock("g1 resumed with its agent imported from stuck_agents:AGENTS")

        run_cell(page, 2)  # this kernel serves the agents now
        for run_id in ("b1", "b2"):
            badge(run_id).and_(dash.locator(".nbd-s-needs_attention")).wait_for(timeout=60_000)
        reason = row("b1").locator(".nbd-c-reason").inner_text()
        assert "Retry runs it again, Settle denies it" in reason, reason
        clock("g1 taken over and completed; b1 and b2 need attention")
        shot(page, f"{name}-stuck-attention.png")

        approve.click()
        badge("w1").and_(dash.locator(".nbd-s-completed")).wait_for(timeout=60_000)
        said = dash.locator(".nbd-dash-approval .nbd-dash-outcome").first.inner_text()
        assert "the run resumes here" in said, said
        retry = dash.locator("tr.nbd-dash-subrow[data-run-id='b1'] button.nbd-dash-retry")
        enabled(retry)
        retry.click()
        badge("b1").and_(dash.locator(".nbd-s-completed")).wait_for(timeout=60_000)
        message = dash.locator(".nbd-dash-message").inner_text()
        assert message.startswith("b1: retried; the run resumes here"), message
        clock("w1 approved, b1 retried from its row")

        # b2 from its run widget (a click on its row shows it below): Settle, with a reason
        row("b2").locator(".nbd-c-run_id").click()
        view = page.locator(".nbd-run").filter(has=page.locator(".nbd-run-id", has_text="b2"))
        enabled(view.locator("button.nbd-settle"))
        assert view.locator(".nbd-settle-reason").count() == 0  # asked for once Settle is clicked
        view.locator("button.nbd-settle").click()
        view.locator(".nbd-settle-reason").fill("charged by hand")
        shot(page, f"{name}-stuck-settle.png")
        view.locator("button.nbd-settle-send").click()
        view.locator(".nbd-badge.nbd-status-completed").wait_for(timeout=60_000)
        said = view.locator(".nbd-attention .nbd-card-outcome").inner_text()
        assert said.startswith("settled: charged by hand; the run resumes here"), said
        badge("b2").and_(dash.locator(".nbd-s-completed")).wait_for(timeout=60_000)
        clock("b2 settled from its widget: every stuck run completed")
        shot(page, f"{name}-stuck-solved.png")
