"""explain() with a late result: said before the next steps, and phrased for each reader."""

from __future__ import annotations

from typing import Any

import nbdurable as nd
from nbdurable import inspect as ins
from nbdurable.runs import LateResult, RunPatch, RuntimeRun, ToolIntent

NOW = 1_800_000_000_000


def _parked(store: Any, outcome: str = "result") -> None:
    run = RuntimeRun(
        run_id="r", agent_id="payer", agent_version="1", session_id="s", prompt='"pay"',
        state="pending", created_at=NOW, updated_at=NOW,
    )  # fmt: skip
    store.rt_insert(run, enqueue=False, max_pending=10)
    intent = ToolIntent(
        run_id="r", tool_call_id="c1", tool_name="pay", step_index=0, state="started"
    )
    store.rt_intent(intent, fence=0)
    store.rt_update("r", RunPatch(state="needs_attention", reason="tool 'pay' was interrupted"))
    result = {"tool_call_id": "c1", "tool_name": "pay", "result": "paid 5", "is_error": False}
    late = LateResult(
        tool_call_id="c1", tool_name="pay", step_index=0, fence=1, at=NOW,
        outcome=outcome,  # type: ignore[arg-type]
        result=result if outcome == "result" else None,
    )  # fmt: skip
    store.rt_late_result("r", late, now=NOW)


def test_the_late_result_comes_first_and_each_reader_may_use_it() -> None:
    store: Any = nd.open_store("memory://")
    _parked(store)
    api = ins.explain(store, "r", now=NOW)
    assert api.details[1].startswith("late: tool 'pay' (call c1) already ran once")
    assert "await run.use_late_result()" in api.actions[1]
    assert "a second time" in api.actions[2] and "run.retry(rerun=True)" in api.actions[2]
    notebook = ins.explain(store, "r", now=NOW, context="notebook")
    assert notebook.actions[0].startswith("%durable retry r --use-late-result")
    terminal = ins.explain(store, "r", now=NOW, context="terminal")
    assert terminal.actions[0].startswith("nbdurable runs retry r --use-late-result")
    assert "--rerun" in terminal.actions[1]
    # once the call is settled, the late result stays a fact, and no action offers it
    done = ToolIntent(
        run_id="r", tool_call_id="c1", tool_name="pay", step_index=0, state="completed",
        result={"tool_call_id": "c1", "tool_name": "pay", "result": "x", "is_error": False},
    )  # fmt: skip
    store.rt_intent(done, fence=0)
    settled = ins.explain(store, "r", now=NOW)
    assert any("already ran once" in d for d in settled.details)
    assert not any("use_late_result" in a for a in settled.actions)


def test_a_cut_off_call_is_said_and_cannot_be_used() -> None:
    store: Any = nd.open_store("memory://")
    _parked(store, "cut_off")
    why = ins.explain(store, "r", now=NOW, context="terminal")
    assert any("was still running" in d and "unknown" in d for d in why.details)
    assert not any("--use-late-result" in a for a in why.actions)
    assert "--rerun" in why.actions[0] and "may have run already" in why.actions[0]
