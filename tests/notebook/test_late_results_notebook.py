"""A late result in a notebook: the run's card and ``%durable explain`` say it before a retry,
``%durable retry`` refuses to run the call again blind, ``--use-late-result`` settles it.

The interrupted call comes from a real kernel-like process killed in its tool
(as in test_widgets_restart.py); its late result is the one a paused owner
would have kept (tests/runtime/test_late_results.py makes one with signals).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.events._model import TOOL_LATE_RESULT
from nbdurable.notebook import NotebookSession
from nbdurable.notebook.widgets import RunWidget
from nbdurable.runs import LateResult, lease_holder

from . import interrupted
from .conftest import eventually, state
from .test_widgets_restart import kill_a_kernel_in_its_tool

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _keep_late_result(nb: NotebookSession, run_id: str) -> LateResult:
    """What a fenced-out owner writes: the record's note and its event, both unfenced."""
    [intent] = nb.runtime.runtime_store.rt_intents(run_id)
    result = {"type": "tool_result", "tool_call_id": intent.tool_call_id, "tool_name": "charge"}
    late = LateResult(
        tool_call_id=intent.tool_call_id,
        tool_name="charge",
        step_index=intent.step_index,
        fence=1,
        owner=lease_holder("runtime-old"),
        at=nb.runtime.now(),
        result={**result, "result": "charged 5 (late)", "is_error": False},
    )
    nb.runtime.runtime_store.rt_late_result(run_id, late, now=nb.runtime.now())
    event = nd.events.NewEvent(
        type=TOOL_LATE_RESULT, payload=late.model_dump(mode="json"), created_at=late.at
    )
    nb.runtime.event_store.append_events(run_id, [event])
    return late


async def test_a_late_result_is_shown_and_settles_the_call_from_the_notebook(
    ip: Any, nb: NotebookSession, magic: Any, tmp_path: Path
) -> None:
    kill_a_kernel_in_its_tool(tmp_path, "bill", lease_ms=1500)
    ip.user_ns["biller"] = interrupted.biller()
    magic("durable", "resume bill")
    await eventually(lambda: state(nb, "bill") == "needs_attention", timeout=20)
    _keep_late_result(nb, "bill")

    widget = RunWidget(nb.runtime, "bill")
    await eventually(lambda: bool(widget.late_results))
    [line] = widget.late_results
    assert (
        "already ran once" in line
        and f"runtime-old (pid {os.getpid()} on " in line
        and "charged 5 (late)" in line
    )

    why = magic("durable", "explain bill").value
    assert (
        why.actions[0] == "%durable retry bill --use-late-result  (settles it with the late result)"
    )
    assert why.actions[1].startswith(
        "%durable retry bill --rerun  (runs the interrupted tool again, a second time)"
    )
    assert any("charged 5 (late)" in detail for detail in why.details)

    refused = magic("durable", "retry bill")
    assert "was not retried" in refused.stderr and "--use-late-result" in refused.stderr
    assert state(nb, "bill") == "needs_attention"

    used = magic("durable", "retry bill --use-late-result")
    assert "settled with its late result" in used.stdout
    result = await nb.run("bill").result()
    assert result.text == "Charged 5."
    checkpoint = nb.store.load("bill")
    assert checkpoint is not None
    results = [r.result for m in checkpoint.messages for r in m.tool_results]
    assert results == ["charged 5 (late)"]  # the tool did not run again
    widget.close()
