"""Conformance: late results on every store declaring the runtime capability.

``rt_late_result`` is the one write an owner that lost the run still makes: it
adds a :class:`LateResult` to the record and changes nothing else (state, fence,
lease, intents), so it is not fenced. Adding the same one twice is a no-op;
handles racing from threads (other processes' view of the store) all land; a
later fenced write by the run's owner keeps them.
"""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd
from nbdurable.runs import MAX_LATE_RESULTS, LateResult, RunPatch, ToolIntent

from ._fixtures import NOW, Reopen
from ._threads import handles, in_threads
from ._verdicts import waiting


def _late(call: str = "call_1_0", fence: int = 1, at: int = NOW + 10) -> LateResult:
    result = {"type": "tool_result", "tool_call_id": call, "tool_name": "pay", "result": "paid"}
    return LateResult(
        tool_call_id=call,
        tool_name="pay",
        step_index=0,
        fence=fence,
        owner="rt-old@host:42#boot/ns/1",
        at=at,
        result={**result, "is_error": False},
    )


def _taken_over(store: Any, run_id: str = "r1") -> Any:
    """A run that a second owner took over (fence 2) with a call left started by the first."""
    waiting(store, run_id)
    store.rt_update(run_id, RunPatch(state="running", fence=1, lease_owner="old"))
    intent = ToolIntent(
        run_id=run_id, tool_call_id="call_1_0", tool_name="pay", step_index=0, state="started"
    )
    store.rt_intent(intent, fence=1)
    return store.rt_update(
        run_id, RunPatch(state="needs_attention", fence=2, lease_owner=None, reason="x")
    )


def test_a_stale_owner_adds_a_late_result_and_changes_nothing_else(
    runtime_store: Any, reopen: Reopen
) -> None:
    before = _taken_over(runtime_store)
    with pytest.raises(nd.FencedOutError):
        runtime_store.rt_update("r1", RunPatch(reason="stale"), fence=1)  # what it may not do
    stored = runtime_store.rt_late_result("r1", _late(), now=NOW + 20)
    assert stored.late_results == [_late()]
    unchanged = ("state", "fence", "lease_owner", "reason", "verdicts", "operations")
    assert all(getattr(stored, k) == getattr(before, k) for k in unchanged)
    assert stored.updated_at == NOW + 20
    [intent] = runtime_store.rt_intents("r1")
    assert intent.state == "started" and intent.result is None
    again = runtime_store.rt_late_result("r1", _late(at=NOW + 99), now=NOW + 30)  # a retried write
    assert again.late_results == [_late()] and again.updated_at == NOW + 20
    # the owner's later fenced writes keep it; another handle reads it
    runtime_store.rt_update("r1", RunPatch(state="pending", reason=None), fence=2)
    other = reopen()
    try:
        assert other.rt_get("r1").late_results == [_late()]
    finally:
        if other is not runtime_store:
            other.close()
    with pytest.raises(nd.RunNotFoundError):
        runtime_store.rt_late_result("nope", _late(), now=NOW)


def test_a_record_keeps_the_newest_late_results(runtime_store: Any) -> None:
    _taken_over(runtime_store)
    for i in range(MAX_LATE_RESULTS + 3):
        runtime_store.rt_late_result("r1", _late(f"call_{i}_0"), now=NOW + i)
    kept = runtime_store.rt_get("r1").late_results
    assert len(kept) == MAX_LATE_RESULTS
    assert kept[0].tool_call_id == "call_3_0" and kept[-1].tool_call_id == f"call_{i}_0"
    # the same call under another fence (a second lost owner) is a result of its own
    runtime_store.rt_late_result("r1", _late(f"call_{i}_0", fence=2), now=NOW + 50)
    assert [r.fence for r in runtime_store.rt_get("r1").late_results[-2:]] == [1, 2]


def test_racing_late_results_all_land(runtime_store: Any, reopen: Reopen) -> None:
    with handles(runtime_store, reopen) as racing:
        _taken_over(runtime_store)

        def add(i: int) -> None:
            for j in range(3):
                racing[i].rt_late_result("r1", _late(f"call_{i}_{j}"), now=NOW + j)

        in_threads(add, len(racing), timeout=30)
        calls = sorted(r.tool_call_id for r in runtime_store.rt_get("r1").late_results)
        assert calls == sorted(f"call_{i}_{j}" for i in range(4) for j in range(3))
