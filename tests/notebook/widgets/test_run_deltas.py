"""The run widget sends its views deltas: appended text and changed steps, numbered.

No browser: the widget's comm records what it publishes; ``FrontEndSteps`` rebuilds
the steps a view holds from those messages as run_view.js does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.notebook.widgets import RunWidget
from nbdurable.notebook.widgets._run_delta import StepDeltas

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


def sent(log: list[Any], widget: RunWidget, method: str) -> list[dict[str, Any]]:
    """The data of every message of ``method`` (update, custom) the widget published."""
    return [
        data
        for _t, comm_id, data in log
        if comm_id == widget.comm.comm_id and data.get("method") == method
    ]


def talker(words: int, delay: float = 0.0005) -> nd.Agent:
    text = "".join(f"word{i} " for i in range(words))
    return nd.Agent(
        "talker", nd.ScriptedModel([text], stream_delay=delay), [], version="1", stream=True
    )


async def test_a_streamed_answer_goes_out_as_appends_and_the_snapshot_once(
    tmp_path: Path, comms: list[Any]
) -> None:
    async with runtime_for(tmp_path, talker(1500)) as runtime:
        run = await runtime.submit("talker", "talk")
        widget = RunWidget(runtime, run.run_id)
        await run.result()
        await eventually(lambda: not widget.following)
        text = widget.text
    deltas = [m for _t, m in step_messages(comms, widget)]
    assert len(deltas) >= 5 and [m["seq"] for m in deltas] == list(range(1, len(deltas) + 1))
    assert deltas[0]["changed"][0]["text"]  # the new step whole, once
    appends = [p for m in deltas[1:] for p in m["changed"] if "append" in p]
    assert len(appends) >= 4 and all("text" not in p for p in appends)
    view = FrontEndSteps()
    for message in deltas:
        view.receive(message)
    assert view.text == text and view.gaps == 0
    assert view.ordered() == widget.steps  # the view holds what the kernel holds
    updates = sent(comms, widget, "update")
    assert not any("text" in u["state"] or "steps" in u["state"] for u in updates)
    full = [u["state"]["snapshot"] for u in updates if u["state"].get("snapshot", {}).get("steps")]
    assert len(full) == 1 and full[0] == {"seq": deltas[-1]["seq"], "steps": widget.steps}
    # what the goal asks: about the text once in deltas and once in the end's snapshot
    flushes = len(deltas)
    total = sum(size(d) for d in sent(comms, widget, "update") + sent(comms, widget, "custom"))
    assert total <= 2 * len(text.encode()) + 200 * flushes, (total, len(text), flushes)


@pytest.mark.slow
async def test_a_view_rendered_mid_stream_asks_for_a_snapshot_and_then_follows(
    tmp_path: Path, comms: list[Any]
) -> None:
    async with runtime_for(tmp_path, talker(3000, delay=0.001)) as runtime:
        run = await runtime.submit("talker", "talk")
        widget = RunWidget(runtime, run.run_id)
        await eventually(lambda: len(step_messages(comms, widget)) >= 3)
        assert widget.status == "running"
        before = len(step_messages(comms, widget))
        front_end_sends(widget, {"type": "snapshot"})  # a second view renders
        answer = step_messages(comms, widget)[before][1]
        assert answer["type"] == "snapshot" and answer["seq"] == before
        assert answer["steps"] == widget.steps and answer["steps"][0]["streaming"]
        await run.result()
        await eventually(lambda: not widget.following)
    late = FrontEndSteps()  # it heard nothing before its snapshot
    for _t, message in step_messages(comms, widget)[before:]:
        late.receive(message)
    assert late.gaps == 0 and late.text == widget.text and late.ordered() == widget.steps
    assert 0 < len(answer["steps"][0]["text"]) < len(widget.text)


async def test_a_view_that_missed_a_delta_skips_it_until_a_snapshot(
    tmp_path: Path, comms: list[Any]
) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.")
        await run.wait("waiting_approval")
        widget = RunWidget(runtime, run.run_id)
        await eventually(lambda: widget.status == "waiting_approval" and bool(widget.approvals))
        await run.approve()
        await run.result()
        await eventually(lambda: not widget.following)
        front_end_sends(widget, {"type": "snapshot"})
    messages = [m for _t, m in step_messages(comms, widget)]
    deltas = [m for m in messages if m["type"] == "steps"]
    assert len(deltas) >= 2
    view = FrontEndSteps()
    for message in messages[1:]:  # the first delta never arrived
        view.receive(message)
    assert view.gaps >= 1  # the out-of-sequence delta was not applied...
    assert view.ordered() == widget.steps  # ...and the snapshot made the view whole


@pytest.mark.slow
async def test_an_update_of_a_long_run_does_not_grow_with_its_steps(
    tmp_path: Path, comms: list[Any]
) -> None:
    steps = 60
    async with runtime_for(tmp_path, looker(steps, 0.005)) as runtime:
        run = await runtime.submit("worker", "go")
        widget = RunWidget(runtime, run.run_id)
        await run.result()
        await eventually(lambda: not widget.following)
    deltas = [m for _t, m in step_messages(comms, widget)]
    late = [m for m in deltas if min(p["index"] for p in m["changed"]) >= steps - 10]
    assert late and max(size(m) for m in late) < 2048
    updates = [u for u in sent(comms, widget, "update") if "snapshot" not in u["state"]]
    assert max(size(u) for u in updates) < 2048
    view = FrontEndSteps()
    for message in deltas:
        view.receive(message)
    assert len(view.ordered()) == steps + 1 and view.ordered() == widget.steps


async def test_the_synced_state_holds_every_step_once_the_run_stops(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up.")
        widget = RunWidget(runtime, run.run_id)
        await eventually(lambda: widget.status == "waiting_approval" and bool(widget.approvals))
        waiting = widget.get_state()  # what a notebook saved now would hold
        await run.approve()
        await run.result()
        await eventually(lambda: not widget.following)
        done = widget.get_state()
        widget.close()
    assert "text" not in waiting and "steps" not in waiting
    texts = [s["text"] for s in waiting["snapshot"]["steps"]]
    assert texts == ["Looking at stg_2023.", "stg_2023 is empty."]
    assert waiting["status"] == "waiting_approval"
    assert done["snapshot"]["steps"] == widget.steps and len(widget.steps) == 3
    assert done["snapshot"]["steps"][-1]["text"] == "Done: dropped stg_2023."


def test_a_patch_carries_appended_text_changed_fields_and_replaced_text() -> None:
    deltas = StepDeltas()
    step = {"index": 0, "text": "Hel", "streaming": True, "tool_calls": []}
    assert deltas.delta([step]) == {"type": "steps", "seq": 1, "changed": [step]}
    assert deltas.delta([dict(step)]) is None  # nothing changed: nothing sent
    grown = {**step, "text": "Hello", "streaming": False}
    assert deltas.delta([grown]) == {
        "type": "steps",
        "seq": 2,
        "changed": [{"index": 0, "append": "lo", "streaming": False}],
    }
    redone = {**grown, "text": "Other"}  # a failed attempt's text replaced
    next_step = {"index": 1, "text": "", "streaming": False, "tool_calls": []}
    assert deltas.delta([redone, next_step])["changed"] == [  # type: ignore[index]
        {"index": 0, "text": "Other"},
        next_step,
    ]
    assert deltas.delta([next_step]) == {"type": "steps", "seq": 4, "changed": [], "removed": [0]}
    assert deltas.snapshot() == {"seq": 4, "steps": [next_step]}
