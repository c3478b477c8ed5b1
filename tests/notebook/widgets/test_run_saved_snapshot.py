"""The saved snapshot of a run view never crosses the comm whole once a front end has it.

A front end's model asks for a snapshot when it is created and from then on composes
the ``snapshot`` trait from the deltas (run_view.js ``composeSteps``, which is what
its widget manager saves in a notebook); the kernel syncs that trait only while no
front end has asked (nbclient, ``nbconvert --execute``). No browser: the widget's comm
records what it publishes; ``FrontEndSteps`` composes the steps as run_view.js does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbdurable.notebook.widgets import RunWidget

from ..widget_fixtures import (  # noqa: F401
    FrontEndSteps,
    comms_fixture,
    eventually,
    front_end_sends,
    janitor,
    looker,
    runtime_for,
    size,
    step_messages,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

GAP = 0.005
"""Messages closer than this (seconds) were sent by one flush: one update."""


def updates_after(log: list[Any], start: int, widget: RunWidget) -> list[list[dict[str, Any]]]:
    """The widget's messages from ``log[start]`` on, grouped by flush (one update each)."""
    grouped: list[list[dict[str, Any]]] = []
    last = -1.0
    for at, comm_id, data in log[start:]:
        if comm_id != widget.comm.comm_id:
            continue
        if grouped and at - last < GAP:
            grouped[-1].append(data)
        else:
            grouped.append([data])
        last = at
    return grouped


def carries_snapshot(update: list[dict[str, Any]]) -> bool:
    """The update syncs the ``snapshot`` trait or answers with a snapshot: the whole run."""
    return any(
        "snapshot" in data.get("state", {}) or data.get("content", {}).get("type") == "snapshot"
        for data in update
    )


def new_steps(update: list[dict[str, Any]]) -> int:
    """How many steps the update's deltas bring whole (new ones)."""
    return sum(
        1
        for data in update
        if data.get("content", {}).get("type") == "steps"
        for patch in data["content"]["changed"]
        if "tool_calls" in patch  # a new step comes whole; a known one as changed fields
    )


async def test_after_a_front_end_asked_an_update_costs_at_most_2_kb_a_new_step(
    tmp_path: Path, comms: list[Any]
) -> None:
    steps = 25
    async with runtime_for(tmp_path, looker(steps, 0.001)) as runtime:
        run = await runtime.submit("worker", "go")
        widget = RunWidget(runtime, run.run_id)
        front_end_sends(widget, {"type": "snapshot"})  # its model is created: the first render
        rendered = len(comms)
        await run.result()
        await eventually(lambda: not widget.following)
    after = updates_after(comms, rendered, widget)
    assert len(after) >= 3
    # one step an update (widget_bench's pace): <= 2 KB; a loaded loop may batch steps
    for update in after:
        assert sum(size(data) for data in update) <= 2048 * max(1, new_steps(update)), update
    assert not any(carries_snapshot(update) for update in after)
    assert widget.snapshot == {}  # the kernel never synced it: the front end composes it
    view = FrontEndSteps()  # what run_view.js composes, and its widget manager saves
    for _t, message in step_messages(comms, widget):
        view.receive(message)
    assert view.gaps == 0 and view.ordered() == widget.steps and len(widget.steps) == steps + 1
    # the run is large enough to prove it: its snapshot alone is over four updates' worth
    assert size({"seq": view.seq, "steps": view.ordered()}) > 4 * 2048


async def test_without_a_front_end_the_snapshot_is_synced_at_each_pause_and_at_the_end(
    tmp_path: Path, comms: list[Any]
) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.")
        widget = RunWidget(runtime, run.run_id)
        await eventually(lambda: widget.status == "waiting_approval" and bool(widget.approvals))
        paused = [s["text"] for s in widget.get_state()["snapshot"]["steps"]]
        front_end_sends(widget, {"type": "snapshot"})  # a view renders while the run waits
        rendered = len(comms)
        answer = step_messages(comms, widget)[-1][1]
        await run.approve()
        await run.result()
        await eventually(lambda: not widget.following)
    assert paused == ["Looking at stg_2023.", "stg_2023 is empty."]  # headless until then
    assert answer["type"] == "snapshot" and [s["text"] for s in answer["steps"]] == paused
    after = updates_after(comms, rendered, widget)
    assert after and not any(carries_snapshot(update) for update in after)
    view = FrontEndSteps()  # a model created while the run waited: its answer, then deltas
    messages = [m for _t, m in step_messages(comms, widget)]
    for message in messages[messages.index(answer) :]:
        view.receive(message)
    assert view.gaps == 0 and view.ordered() == widget.steps and len(widget.steps) == 3
