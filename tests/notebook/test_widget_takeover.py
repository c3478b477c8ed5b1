"""The run widget's one line about a takeover (the run_taken_over event), without a browser."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.notebook.widgets import RunWidget
from nbdurable.runs import ToolIntent

from .widget_fixtures import comms_fixture, eventually, runtime_for  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@nd.tool
def charge(amount: int) -> str:
    """Charge a card."""
    return f"charged {amount}"


async def test_the_widget_shows_who_the_run_was_taken_over_from(
    tmp_path: Path, comms: list[Any]
) -> None:
    agent = nd.Agent(
        "charger",
        nd.ScriptedModel([nd.Turn.call("charge", amount=3), "charged"]),
        [charge],
        version="1",
        tool_recovery={"charge": "safe"},
    )
    async with runtime_for(tmp_path, agent) as runtime:
        store: Any = runtime.store
        await runtime.engine.close()  # this runtime only watches: the claim below is "theirs"
        run = await runtime.submit("charger", "charge")
        lapsed = runtime.now() - 60_000
        claimed = store.rt_claim("worker-elsewhere", lapsed, 1_000, runtime.registry.keys())
        intent = ToolIntent(
            run_id=run.run_id,
            tool_call_id="call_1_0",
            tool_name="charge",
            step_index=0,
            state="started",
        )
        store.rt_intent(intent, fence=claimed.fence)
        widget = RunWidget(runtime, run.run_id)
        async with await nd.DurableRuntime.open(store=store, agents=[agent]) as taker:
            result = await asyncio.wait_for((await taker.get_run(run.run_id)).result(), 10)
        assert result.text == "charged"
        await eventually(lambda: widget.status == "completed")
        await eventually(lambda: widget.takeover != "")
    assert widget.takeover.startswith("Taken over from worker-elsewhere: its lease lapsed")
    assert "step 0 runs again" in widget.takeover
    assert "charge (call_1_0, safe)" in widget.takeover
    sent = [data["state"] for _t, _c, data in comms if data.get("method") == "update"]
    assert any("takeover" in state for state in sent)  # it reached the front end
