"""Every verdict's confirmation says what happens next, truthfully (issue 37, item 2).

Three cases, each through a run widget's card, the dashboard and ``%durable approve``:
the run resumes here (this kernel serves its agent), it resumes on worker X (a live
`nbdurable worker` process serves it), or it waits for a worker serving the agent
(and the confirmation says how to provide one).
"""

from __future__ import annotations

import re
import signal
from typing import Any

import pytest
from support import gated_agents
from support.runtime_harness import worker

import nbdurable as nd
from nbdurable.notebook import NotebookSession
from nbdurable.notebook.widgets import RunsDashboard, RunWidget
from nbdurable.runtime import DurableRuntime

from .conftest import Shown, eventually, janitor, state
from .widget_fixtures import front_end_sends

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

URL = "sqlite:///.nbdurable/runs.db"


async def _approve_on_card(runtime: Any, run_id: str) -> str:
    """Click Approve on the run widget's card (the front end's message); its confirmation."""
    widget = RunWidget(runtime, run_id)
    await eventually(lambda: bool(widget.approvals) and widget.approvals[0]["state"] == "pending")
    card = widget.approvals[0]
    content = {"type": "approve", "approval_id": card["approval_id"], "token": card["token"]}
    front_end_sends(widget, {**content, "reason": None})
    await widget.settled()
    assert widget.approvals[0]["state"] == "approved"
    message = str(widget.approvals[0]["message"])
    widget.close()
    return message


async def _approve_on_dashboard(runtime: Any, run_id: str) -> str:
    dashboard = RunsDashboard(runtime, refresh_interval=60)
    try:
        [outcome] = await dashboard.approve(run_id)
    finally:
        dashboard.close()
    assert outcome.state == "approved"
    return outcome.message


async def _janitors(ip: Any, nb: NotebookSession, magic: Any, *run_ids: str) -> None:
    ip.user_ns.setdefault("janitor", janitor())
    for run_id in run_ids:
        magic("agent", f"janitor --run-id {run_id}", "Clean up the staging tables.")
    for run_id in run_ids:
        await eventually(lambda run_id=run_id: state(nb, run_id) == "waiting_approval")


async def test_resumes_here_when_this_kernel_serves_the_agent(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await _janitors(ip, nb, magic, "w1", "d1")
    here = "approved; the run resumes here (this kernel serves janitor v1)"
    assert await _approve_on_card(nb.runtime, "w1") == here
    assert await _approve_on_dashboard(nb.runtime, "d1") == here
    for run_id in ("w1", "d1"):
        assert (await nb.run(run_id).result()).text == "Done: dropped stg_2023."


async def test_a_run_served_here_that_ended_within_the_decision_resumed_here(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    """This kernel runs the resumed leg on its own loop, possibly within the
    decision's awaits: read after them, the run may have completed already, and
    what followed the decision is still that it resumed here."""
    from nbdurable.notebook._next_step import next_step

    await _janitors(ip, nb, magic, "e1")
    await nb.run("e1").approve()
    assert (await nb.run("e1").result()).text == "Done: dropped stg_2023."
    said = await next_step(nb.runtime, "e1")
    assert said == "the run resumes here (this kernel serves janitor v1)"


async def test_waits_for_a_worker_and_says_how_to_provide_one(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    await _janitors(ip, nb, magic, "w1", "d1", "m1")
    await nb.close()  # the kernel restarts ...
    del ip.user_ns["janitor"]  # ... and nothing defines the agent yet
    waits = (
        "the run waits for a worker serving janitor v1: run the cell defining agent "
        f"'janitor' version '1' ({janitor().origin}), then %durable resume {{run}}, or start "
        f"`nbdurable worker --store {URL} --agents MODULE:AGENTS`"
    )
    assert await _approve_on_card(nb.runtime, "w1") == "approved; " + waits.format(run="w1")
    assert await _approve_on_dashboard(nb.runtime, "d1") == "approved; " + waits.format(run="d1")
    out = magic("durable", "approve m1").stdout.splitlines()
    assert out[1] == "m1: pending; " + waits.format(run="m1")
    assert {state(nb, r) for r in ("w1", "d1", "m1")} == {"pending"}  # nobody resumed them


async def test_resumes_on_the_worker_that_serves_the_agent(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    client = DurableRuntime(store=nb.store, agents=gated_agents.agents)  # submits, never runs
    for run_id in ("w1", "d1", "m1"):
        await client.submit("gatekeeper", "drop it", run_id=run_id)
    proc = worker(URL, None, lease_ms=5_000, agents="support.gated_agents:agents")
    try:
        for run_id in ("w1", "d1", "m1"):
            await eventually(lambda run_id=run_id: state(nb, run_id) == "waiting_approval", 30)
        on_worker = r"approved; the run resumes on worker runtime-\w+ \(pid %d on [^)]+\)"
        card = await _approve_on_card(nb.runtime, "w1")
        assert re.fullmatch(on_worker % proc.pid, card), card
        row = await _approve_on_dashboard(nb.runtime, "d1")
        assert re.fullmatch(on_worker % proc.pid, row), row
        out = magic("durable", "approve m1").stdout.splitlines()
        pattern = r"m1: (pending|running); the run resumes on worker runtime-\w+ \(pid %d on .+\)"
        assert re.fullmatch(pattern % proc.pid, out[1]), out
        for run_id in ("w1", "d1", "m1"):
            await eventually(lambda run_id=run_id: state(nb, run_id) == "completed", 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


async def test_a_verdict_with_other_approvals_open_says_the_run_still_waits(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    two = nd.Turn(
        text="", tool_calls=[("drop_table", {"name": "a"}), ("drop_table", {"name": "b"})]
    )
    tools = janitor().tools
    ip.user_ns["janitor"] = nd.Agent(
        "janitor", nd.ScriptedModel([two, "Both."]), tools, version="2"
    )
    submitted = magic("agent", "janitor --run-id t1", "Drop both.")
    assert submitted.stderr == ""
    await eventually(lambda: state(nb, "t1") == "waiting_approval")
    first = await _approve_on_card(nb.runtime, "t1")
    assert first == "approved; the run goes on once its other approvals are answered"
    out = magic("durable", "approve t1").stdout.splitlines()
    # the kernel's loop runs the leg while the magic reads the record: it may have ended
    assert out[1] in (
        "t1: pending; the run resumes here (this kernel serves janitor v2)",
        "t1: running; the run resumes here (this kernel serves janitor v2)",
        "t1: completed",
    )
    assert (await nb.run("t1").result()).text == "Both."
