"""A kernel restart in the middle of a run: what the notebook says while it waits, and after.

The kernel that dies is a real process killed with SIGKILL in its tool call; the
test's process plays the restarted kernel (``%load_ext``, the agent's cell again,
``%durable resume``), with the real run widget.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ipywidgets import Widget

import nbdurable as nd
from nbdurable.notebook import NotebookSession
from nbdurable.notebook.widgets import RunWidget
from nbdurable.runs import RunPatch

from . import interrupted
from .conftest import eventually, janitor, state
from .widget_fixtures import front_end_sends

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def kill_a_kernel_in_its_tool(tmp_path: Path, run_id: str, lease_ms: int) -> None:
    """Start a kernel-like process executing ``run_id`` and SIGKILL it inside the tool call."""
    folder = tmp_path / ".nbdurable"
    folder.mkdir(exist_ok=True)
    url = f"sqlite:///{folder / 'runs.db'}"
    tests = str(Path(interrupted.__file__).resolve().parents[1])
    code = (
        f"import sys; sys.path.insert(0, {tests!r}); import importlib; "
        f"importlib.import_module({interrupted.__name__!r})"
        f".old_kernel({url!r}, {run_id!r}, {lease_ms})"
    )
    env = {**os.environ, interrupted.DIES_IN_TOOL: "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the tool call started (or the process died)
        assert line == b"in the tool\n", (line, proc.stderr.read() if proc.stderr else b"")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


async def test_a_tool_call_a_kernel_died_in_is_listed_once_and_explained_for_the_notebook(
    ip: Any, nb: NotebookSession, magic: Any, tmp_path: Path
) -> None:
    kill_a_kernel_in_its_tool(tmp_path, "bill", lease_ms=1500)
    ip.user_ns["biller"] = interrupted.biller()  # the restarted kernel runs the agent's cell
    out = magic("durable", "resume bill")
    assert out.stdout.startswith("bill: "), out.text
    await eventually(lambda: state(nb, "bill") == "needs_attention", timeout=20)

    widget = RunWidget(nb.runtime, "bill")
    await eventually(lambda: widget.status == "needs_attention" and bool(widget.steps))
    # the new leg announced the interrupted call again: one call, and it never finished
    calls = [c for step in widget.steps for c in step["tool_calls"]]
    assert [(c["tool_name"], c["state"]) for c in calls] == [("charge", "interrupted")]
    assert widget.summary.startswith("needs attention: tool 'charge'")
    assert widget.progress == "1 step (budget 20)"

    why = magic("durable", "explain bill").value
    assert why.actions[0] == "%durable retry bill  (runs the interrupted tool again)"
    assert "await run." not in str(why)
    assert "%durable retry bill" in magic("durable", "resume bill").stdout

    magic("durable", "retry bill")
    assert (await nb.run("bill").result()).text == "Charged 5."
    await eventually(lambda: widget.status == "completed" and not widget.following)
    calls = [c for step in widget.steps for c in step["tool_calls"]]
    assert [(c["tool_name"], c["state"], c["result"]) for c in calls] == [
        ("charge", "done", "charged 5")
    ]
    assert widget.summary == "completed"
    widget.close()


async def test_resume_says_it_waits_for_the_previous_owners_lease_and_for_how_long(
    ip: Any, nb: NotebookSession, magic: Any
) -> None:
    # What a kernel that died mid-step leaves: running, under a lease nobody renews.
    ip.user_ns["janitor"] = janitor()
    idle = nd.DurableRuntime(store=nb.store, agents=[janitor()])  # not started
    await idle.submit("janitor", "Clean up.", run_id="held")
    until = idle.now() + 2500
    idle.runtime_store.rt_update(
        "held", RunPatch(state="running", lease_owner="runtime-gone", lease_expires_at=until)
    )
    out = magic("durable", "resume held")
    line = out.stdout.splitlines()[0]
    assert line.startswith(
        "held: running; waits for the lease of its previous owner (runtime-gone) to lapse (up to "
    ), line
    assert line.endswith(" s), then goes on in this kernel")
    assert int(line.split("(up to ")[1].split(" s)")[0]) in (1, 2, 3)

    widget = RunWidget(nb.runtime, "held")
    await eventually(lambda: widget.lease_until == until)
    assert widget.lease_owner == "runtime-gone"
    assert widget.summary.startswith("waits for the lease of its previous owner (runtime-gone)")
    # once the lease lapsed, this kernel's runtime takes the run over: the note goes away
    await eventually(lambda: widget.status == "waiting_approval", timeout=15)
    await eventually(lambda: widget.lease_until == 0)
    assert widget.summary == "waiting for approval: drop_table"
    widget.close()


async def test_after_a_restart_a_fresh_view_from_show_moves_the_run_on(
    ip: Any, nb: NotebookSession, magic: Any
) -> None:
    ip.user_ns["janitor"] = janitor()
    first = shown_widget(magic("agent", "janitor --run-id w1", "Clean up."))
    await eventually(lambda: state(nb, "w1") == "waiting_approval")
    first.close()
    await nb.close()  # the kernel restarts: its views are gone with it
    ip.user_ns["janitor"] = janitor()  # the agent's cell runs again
    fresh = shown_widget(magic("durable", "show w1"))
    await eventually(lambda: [c["state"] for c in fresh.approvals] == ["pending"])
    card = fresh.approvals[0]
    front_end_sends(
        fresh,
        {"type": "approve", "approval_id": card["approval_id"], "token": card["token"]},
    )
    await fresh.settled()
    # this kernel serves the agent again, so the approval lets the run finish here
    result = await asyncio.wait_for(nb.run("w1").result(), 15)
    assert result.text == "Done: dropped stg_2023."
    await eventually(lambda: fresh.status == "completed")
    assert fresh.approvals[0]["state"] == "approved" and fresh.summary == "completed"
    fresh.close()


def shown_widget(out: Any) -> RunWidget:
    """The run widget a magic displayed."""
    (model_id,) = [o.data[WIDGET_VIEW]["model_id"] for o in out.displayed if WIDGET_VIEW in o.data]
    widget = Widget.widgets[model_id]
    assert isinstance(widget, RunWidget)
    return widget
