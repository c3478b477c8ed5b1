"""Run records under concurrency: claims from several handles, leases, fenced writes."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.events._model import NewEvent
from nbdurable.runs import RunPatch, RuntimeRun, ToolIntent

from ._fixtures import NOW, Reopen, new_run
from ._threads import in_threads

AGENTS = [("a", "1")]


def submitted(i: int, session: str) -> RuntimeRun:
    return new_run(f"r{i:03d}", session_id=session)


def test_concurrent_claims_take_every_run_once_in_session_order(
    runtime_store: Any, reopen: Reopen
) -> None:
    store = runtime_store
    for i in range(60):
        store.rt_insert(submitted(i, f"s{i % 6}"), enqueue=True, max_pending=1000)
    handles = [store, *(reopen() for _ in range(3))]
    taken: list[tuple[str, str]] = []
    guard = threading.Lock()

    def work(n: int) -> None:
        handle = handles[n]
        while (run := handle.rt_claim(f"owner{n}", NOW, 60_000, AGENTS)) is not None:
            with guard:
                taken.append((run.session_id, run.run_id))
            handle.rt_update(
                run.run_id, RunPatch(state="completed", lease_owner=None), fence=run.fence
            )

    in_threads(work, len(handles), timeout=60)
    counts = Counter(run_id for _, run_id in taken)
    assert len(counts) == 60 and set(counts.values()) == {1}
    for session in {s for s, _ in taken}:
        order = [run_id for s, run_id in taken if s == session]
        assert order == sorted(order)
    assert {r.fence for r in store.rt_list()} == {1}
    assert {r.state for r in store.rt_list()} == {"completed"}


def test_a_stale_owner_cannot_write_after_a_takeover(runtime_store: Any, reopen: Reopen) -> None:
    store = runtime_store
    store.rt_insert(submitted(1, "s"), enqueue=False, max_pending=10)
    # A 1 ms lease: it lapses by the caller's clock (NOW + 5 s) and, on PostgreSQL,
    # whose leases run by the database's clock, by the time of the next claim.
    first = store.rt_claim("old", NOW, 1, AGENTS)
    assert first is not None and first.fence == 1
    store.append_events(first.run_id, [NewEvent(type="x", payload={}, created_at=NOW)], fence=1)
    other = reopen()
    time.sleep(0.01)
    second = other.rt_claim("new", NOW + 5_000, 1_000, AGENTS)  # the old lease lapsed
    assert second is not None and second.run_id == first.run_id and second.fence == 2
    event = NewEvent(type="x", payload={}, created_at=NOW)
    intent = ToolIntent(
        run_id=first.run_id, tool_call_id="c", tool_name="t", step_index=0, state="started"
    )
    with pytest.raises(nd.FencedOutError):
        store.append_events(first.run_id, [event], fence=1)
    with pytest.raises(nd.FencedOutError):
        store.rt_journal(first.run_id, 0, "{}", fence=1)
    with pytest.raises(nd.FencedOutError):
        store.rt_intent(intent, fence=1)
    with pytest.raises(nd.FencedOutError):
        store.rt_update(first.run_id, RunPatch(state="completed"), fence=1)
    checkpoint = nd.AgentCheckpoint(
        run_id=first.run_id,
        step_id=f"{first.run_id}#0",
        step_index=0,
        status="running",
        created_at=NOW,
        messages=(nd.user("hi"),),
    )
    with pytest.raises(nd.FencedOutError):
        store.save_with_events(checkpoint, [event], fence=1)
    assert not store.rt_renew(first.run_id, "old", 1, NOW + 10_000)
    assert store.rt_intents(first.run_id) == [] and store.rt_journaled(first.run_id, 0) is None
    assert store.load(first.run_id) is None
    other.append_events(first.run_id, [event], fence=2)
    assert [e.offset for e in store.read_events(first.run_id)] == [1, 2]
    other.save_with_events(checkpoint, [event], fence=2)
    assert store.load(first.run_id) == checkpoint
    assert store.rt_get(first.run_id).lease_owner == "new"


def test_a_submitted_run_has_an_empty_log_until_deleted(runtime_store: Any) -> None:
    store = runtime_store
    store.rt_insert(submitted(1, "s"), enqueue=False, max_pending=10)
    assert store.read_events("r001") == []  # known to the runtime, no event yet
    store.delete("r001")
    assert store.rt_get("r001") is None and store.rt_list() == []
    with pytest.raises(nd.RunNotFoundError):
        store.read_events("r001")
