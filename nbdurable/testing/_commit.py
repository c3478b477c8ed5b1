"""Conformance: ``rt_commit``, a run owner's writes in one fenced transaction.

An optional capability (``Capability.COMMIT``, :meth:`RunStore.rt_commit`): every
bundled store with run records has it; a store without it is skipped here (the
runtime then makes the writes one by one). Everything given lands, or nothing does.
"""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd
from nbdurable.durable.store import Capability, supports
from nbdurable.events._model import NewEvent
from nbdurable.runs import RunPatch, RuntimeRun, ToolIntent

from ._fixtures import NOW, new_run


@pytest.fixture
def committing(runtime_store: Any) -> Any:
    """``runtime_store`` when it declares the ``commit`` capability; else the test skips."""
    if not supports(runtime_store, Capability.COMMIT):
        pytest.skip(f"{type(runtime_store).__name__} writes a run owner's changes one by one")
    return runtime_store


def owned(store: Any, run_id: str = "r1") -> RuntimeRun:
    """A run claimed by an owner: its fence is 1."""
    store.rt_insert(new_run(run_id), enqueue=False, max_pending=100)
    claimed = store.rt_claim("me", NOW, 60_000, {("a", "1"): None})
    assert claimed is not None and claimed.run_id == run_id
    return claimed  # type: ignore[no-any-return]


def event(n: int) -> NewEvent:
    return NewEvent(type="tool_call", step_index=n, payload={"n": n}, created_at=NOW + n)


def intent(call: str, state: str = "started", result: Any = None) -> ToolIntent:
    return ToolIntent(
        run_id="r1", tool_call_id=call, tool_name="probe", step_index=0, state=state, result=result
    )


def test_everything_given_lands_together(committing: Any) -> None:
    run = owned(committing)
    added, record = committing.rt_commit(
        "r1",
        fence=run.fence,
        events=[event(0), event(1)],
        journal=(0, '{"text": "hi"}'),
        changes=RunPatch(operations=2, model_attempts=0, updated_at=NOW + 5),
        intents=[intent("c1"), intent("c2")],
    )
    assert [e.offset for e in added] == [1, 2]
    assert [e.payload for e in committing.read_events("r1")] == [{"n": 0}, {"n": 1}]
    assert committing.rt_journaled("r1", 0) == '{"text": "hi"}'
    assert record is not None and record.operations == 2 and record.updated_at == NOW + 5
    stored = committing.rt_get("r1")
    assert stored.operations == 2 and stored.state == run.state and stored.fence == run.fence
    assert sorted(i.tool_call_id for i in committing.rt_intents("r1")) == ["c1", "c2"]
    # Offsets continue; an intent is completed by a later write; no changes, no record.
    done = intent("c1", "completed", {"ok": True})
    added, record = committing.rt_commit("r1", fence=run.fence, events=[event(2)], intents=[done])
    assert [e.offset for e in added] == [3] and record is None
    by_call = {i.tool_call_id: i for i in committing.rt_intents("r1")}
    assert by_call["c1"].state == "completed" and by_call["c2"].state == "started"


def test_a_stale_fence_writes_nothing(committing: Any) -> None:
    run = owned(committing)
    with pytest.raises(nd.FencedOutError):
        committing.rt_commit(
            "r1",
            fence=run.fence + 1,
            events=[event(0)],
            journal=(0, "{}"),
            changes=RunPatch(operations=9),
            intents=[intent("c1")],
        )
    with pytest.raises(nd.FencedOutError):  # without record changes too
        committing.rt_commit("r1", fence=run.fence - 1, events=[event(0)], intents=[intent("c1")])
    assert committing.read_events("r1") == []
    assert committing.rt_journaled("r1", 0) is None
    assert committing.rt_intents("r1") == []
    assert committing.rt_get("r1") == run


def test_a_change_of_state_is_refused_before_anything_is_written(committing: Any) -> None:
    run = owned(committing)
    with pytest.raises(nd.ConfigurationError, match="state"):
        committing.rt_commit(
            "r1", fence=run.fence, events=[event(0)], changes=RunPatch(state="failed")
        )
    assert committing.rt_get("r1") == run
    with pytest.raises(nd.RunNotFoundError):
        committing.rt_commit("gone", fence=1, changes=RunPatch(operations=1))
