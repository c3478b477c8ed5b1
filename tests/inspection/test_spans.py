"""A run's spans from its event log, and the timeline drawn from them.

Real runs: a runtime run with a tool, a model that fails once (model_retry) and
an approval that takes real time; a loop run (generate_text with a session)
suspended and resumed. Time passes for real (sleeps), so only lower bounds and
orderings are asserted, never speeds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import nbdurable as nd
from nbdurable import inspect as ins
from nbdurable.inspect._spans import span_rows
from nbdurable.runtime import Agent, DurableRuntime, ModelRetry

from .conftest import make_run

APPROVAL_WAIT_S = 0.3


@nd.tool
async def slow_lookup(table: str) -> dict[str, Any]:
    """Look a table up (slowly)."""
    await asyncio.sleep(0.05)
    return {"table": table, "rows": 42}


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


async def _runtime_run(store: Any) -> str:
    """Step 0 calls a tool; step 1's model fails once, is retried, then asks for an
    approval that comes APPROVAL_WAIT_S later; step 2 answers."""
    model = nd.ScriptedModel(
        [
            nd.Turn.call("slow_lookup", "Looking.", table="stg_2023"),
            nd.Turn.call("drop_table", "Stale.", name="stg_2023"),
            "Dropped stg_2023.",
        ],
        fail_on=[2],
    )
    agent = Agent(
        "cleaner",
        model,
        version="1",
        tools=[slow_lookup, drop_table],
        model_retry=ModelRetry(max_attempts=3, initial_delay_ms=20, max_delay_ms=40),
    )
    signer = nd.ApprovalSigner("spans-test-secret-" + "x" * 16)
    async with await DurableRuntime.open(store=store, agents=[agent], approval_signer=signer) as rt:
        run = await rt.submit("cleaner", "Clean up stale staging tables.")
        await run.wait("waiting_approval")
        await asyncio.sleep(APPROVAL_WAIT_S)
        await run.approve()
        record = await run.wait()
    assert record.state == "completed"
    return run.run_id


async def test_a_runtime_run_has_a_span_for_each_leg_call_and_wait(runs_store: Any) -> None:
    run_id = await _runtime_run(runs_store)
    frame = ins.spans(runs_store, run_id)
    assert list(frame["kind"]) == [
        "queue_wait",  # submitted -> claimed
        "leg",  # first leg: step 0, then step 1's failed attempt
        "model_call",
        "tool_call",
        "model_call",
        "retry_wait",
        "leg",  # second leg: step 1 again, up to the approval request
        "model_call",
        "approval_wait",
        "queue_wait",  # approved -> claimed
        "leg",  # third leg: the approved call, then step 2
        "tool_call",
        "model_call",
    ]
    assert list(frame.index) == list(range(len(frame)))
    assert (frame["duration_ms"] >= 0).all()
    assert (frame["end"] >= frame["start"]).all()
    assert set(frame["status"]) <= {"ok", "error"}  # nothing left open

    legs = frame[frame["kind"] == "leg"]
    assert list(legs["name"]) == ["cleaner"] * 3
    assert list(legs["step_index"]) == [0, 1, 2]
    assert list(legs["status"]) == ["error", "ok", "ok"]  # the first ended in a model error
    assert legs["detail"].iloc[0] == "first leg, ended: retry_wait"
    assert legs["detail"].iloc[2] == "resumed leg, ended: completed"

    models = frame[frame["kind"] == "model_call"]
    assert list(models["step_index"]) == [0, 1, 1, 2]
    assert list(models["attempt"]) == [1, 1, 2, 1]
    assert list(models["status"]) == ["ok", "error", "ok", "ok"]
    assert set(models["name"]) == {"scripted"}
    assert "scripted failure" in models["detail"].iloc[1]
    assert models["detail"].iloc[0] == "tool_calls, 7 tokens"

    tools = frame[frame["kind"] == "tool_call"]
    assert list(tools["name"]) == ["slow_lookup", "drop_table"]
    assert list(tools["step_index"]) == [0, 1]
    assert tools["duration_ms"].iloc[0] >= 40  # it slept 50 ms
    assert tools["detail"].iloc[1] == "dropped stg_2023"

    # the retry wait runs from the failed attempt to the leg that tried again
    (wait,) = frame[frame["kind"] == "retry_wait"].itertuples()
    failed = models.iloc[1]
    assert wait.step_index == 1
    assert failed["end"] <= wait.start and wait.end <= legs["start"].iloc[1]
    assert wait.detail == failed["detail"]

    # the approval wait covers the gap between the suspension and the verdict
    (approval,) = frame[frame["kind"] == "approval_wait"].itertuples()
    assert approval.name == "drop_table" and approval.step_index == 1
    assert approval.detail == "approved" and approval.tool_call_id == tools["tool_call_id"].iloc[1]
    assert approval.duration_ms >= APPROVAL_WAIT_S * 1000 - 20
    assert legs["start"].iloc[1] <= approval.start <= legs["end"].iloc[1]
    assert approval.end <= legs["start"].iloc[2]
    # the approved call's own time starts at its verdict, in the third leg
    assert tools["start"].iloc[1] >= legs["start"].iloc[2]


async def test_a_loop_run_suspended_and_resumed_has_two_legs_and_the_wait(any_store: Any) -> None:
    await make_run(any_store, "r")
    frame = ins.spans(any_store, "r")
    kinds = list(frame["kind"])
    assert kinds.count("leg") == 2 and "queue_wait" not in kinds and "retry_wait" not in kinds
    assert kinds.count("model_call") == 4  # three tool steps and the answer
    assert [n for n in frame[frame["kind"] == "tool_call"]["name"]] == [
        "lookup",
        "lookup",
        "drop_table",
    ]
    (approval,) = frame[frame["kind"] == "approval_wait"].itertuples()
    legs = frame[frame["kind"] == "leg"]
    assert approval.start >= legs["start"].iloc[0] and approval.end >= legs["end"].iloc[0]
    assert list(legs["name"].isna()) == [True, True]  # no runtime agent
    assert list(legs["detail"]) == ["first leg, ended: suspended", "resumed leg, ended: finished"]
    assert (frame["duration_ms"] >= 0).all()


async def test_a_run_waiting_for_approval_has_an_open_wait() -> None:
    store = nd.InMemorySessionStore()
    await make_run(store, "r", approve=None)
    frame = ins.spans(store, "r")
    (approval,) = frame[frame["kind"] == "approval_wait"].itertuples()
    assert approval.status == "open" and frame["end"].isna()[approval.Index]
    gated = frame[frame["tool_call_id"] == approval.tool_call_id]
    assert list(gated["kind"]) == ["tool_call", "approval_wait"]
    assert list(gated["status"]) == ["open", "open"]


def _event(offset: int, at: int, kind: str, step: int | None = None, **payload: Any) -> nd.Event:
    return nd.Event(
        run_id="r",
        offset=offset,
        type=kind,
        step_index=step,
        operation_id=f"r:model:{step}" if kind.startswith("model_") else None,
        attempt_id=f"a{offset}" if kind == "model_attempt_started" else None,
        payload=payload,
        created_at=at,
    )


def _crashed_log(takeover_event: bool) -> list[nd.Event]:
    """A leg that stops mid model call (no end event), then another runtime's leg."""
    log = [
        _event(1, 1_000, "run_state", state="running", reason=None, next_attempt_at=None),
        _event(2, 1_000, "run_started", resumed=False, next_step_index=0),
        _event(3, 1_010, "model_attempt_started", 0),
        _event(4, 5_000, "run_state", state="running", reason=None, next_attempt_at=None),
    ]
    if takeover_event:
        log.append(
            _event(5, 5_001, "run_taken_over", 0, cause="lease_lapsed", message="Taken over.")
        )
    n = len(log)
    log.append(_event(n + 1, 5_002, "run_started", resumed=True, next_step_index=0))
    return log


@pytest.mark.parametrize("takeover_event", [True, False])
def test_a_leg_that_stopped_without_an_end_leaves_a_takeover_gap(takeover_event: bool) -> None:
    """Constructed logs: a leg that stopped mid-call, then a takeover (with the
    lease's run_taken_over event, and without it as older logs have)."""
    rows = span_rows(_crashed_log(takeover_event), agent="a")
    kinds = [row["kind"] for row in rows]
    assert kinds == ["leg", "model_call", "takeover_gap", "leg"]
    leg, call, gap, second = rows
    assert (leg["status"], leg["end"]) == ("error", 1_010)  # its last event
    assert (call["status"], call["end"]) == ("error", 1_010)
    assert "interrupted" in call["detail"]
    assert gap["start"] == 1_010 and gap["end"] == (5_001 if takeover_event else 5_002)
    assert gap["step_index"] == 0
    if takeover_event:
        assert gap["detail"] == "Taken over."
    assert second["status"] == "open"


async def test_timeline_draws_a_bar_per_span_in_rows_per_step(runs_store: Any) -> None:
    import matplotlib

    run_id = await _runtime_run(runs_store)
    frame = ins.spans(runs_store, run_id)
    figure = ins.plot_timeline(frame)
    assert isinstance(figure, matplotlib.figure.Figure)
    (axes,) = figure.axes
    assert axes.get_title() == "Where the run's time went"
    assert len(axes.patches) == len(frame)
    labels = [t.get_text() for t in axes.get_legend().get_texts()]
    assert labels == [
        "leg",
        "model call",
        "tool call",
        "approval wait",
        "retry wait",
        "queue wait",
    ]
    assert [t.get_text() for t in axes.get_yticklabels()] == ["legs", "step 0", "step 1", "step 2"]
    # the approval wait is the widest bar after the legs' row: where the time went
    widths = {p.get_width(): p for p in axes.patches}
    assert max(widths) >= APPROVAL_WAIT_S * 1000 - 20
    again = ins.plot_timeline(runs_store, run_id)  # a store and a run id: the same spans
    assert len(again.axes[0].patches) == len(frame)
    figure.savefig(__import__("io").BytesIO(), format="png")  # it renders


def test_spans_name_what_they_cannot_read() -> None:
    store = nd.InMemorySessionStore()
    with pytest.raises(nd.RunNotFoundError):
        ins.spans(store, "nope")


async def test_a_denied_call_ends_its_wait_and_its_call_in_error() -> None:
    store = nd.InMemorySessionStore()
    await make_run(store, "r", approve=False)
    frame = ins.spans(store, "r")
    gated = frame[frame["name"] == "drop_table"]
    assert list(gated["kind"]) == ["approval_wait", "tool_call"]
    assert list(gated["status"]) == ["error", "error"]
    assert list(gated["detail"]) == ["denied: not today", "denied: not today"]
