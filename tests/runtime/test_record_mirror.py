"""The runtime's mirror of run records (nbdurable.runtime._record_mirror), on a memory store.

Over PostgreSQL it is exercised end to end by tests/runtime/test_loop_blocking.py;
here its rules are checked directly: what it loads, what a notification makes it
read again, and that an older record never replaces a newer one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from support.records import pending_run

import nbdurable as nd
from nbdurable.durable.store import notify, notify_all
from nbdurable.runs import RunPatch, RuntimeRun
from nbdurable.runtime._record_mirror import MirroredRuntimeStore, RecordMirror, mirror_for

NOW = 1_800_000_000_000


def submitted(run_id: str) -> RuntimeRun:
    return pending_run(run_id, at=NOW)


async def until(condition: Any, timeout: float = 30.0) -> None:
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < timeout
        await asyncio.sleep(0.02)


def test_only_a_remote_store_gets_a_mirror() -> None:
    store = nd.InMemorySessionStore()
    assert mirror_for(store, store) is None  # type: ignore[arg-type]


async def test_the_mirror_loads_follows_notifications_and_keeps_the_newer_record() -> None:
    store: Any = nd.InMemorySessionStore()
    store.rt_insert(submitted("r1"), enqueue=False, max_pending=100)
    mirror = RecordMirror(store, store)
    assert not mirror.active()  # not loaded: reads go to the store
    await mirror.start()
    try:
        assert mirror.active()  # loaded, and a loop runs on this thread
        assert await asyncio.to_thread(mirror.active) is False  # no loop there: the store
        assert [r.run_id for r in mirror.runs()] == ["r1"]
        # Written behind the mirror's back: unseen until notified.
        store.rt_update("r1", RunPatch(state="running", updated_at=NOW + 1))
        store.rt_insert(submitted("r2"), enqueue=False, max_pending=100)
        assert mirror.get("r1").state == "pending"  # type: ignore[union-attr]
        assert mirror.get("r2") is None
        notify(store, "r1")
        notify(store, "r2")  # a run it has not seen: read too
        await until(lambda: mirror.get("r2") is not None)
        await until(lambda: mirror.get("r1").state == "running")  # type: ignore[union-attr]
        assert mirror.runs() == store.rt_list()
        assert mirror.runs(["running"]) == store.rt_list(["running"])
        # A record older than the one held (a read that raced a write) is not
        # taken; the run is read again from the store.
        mirror.put(submitted("r1"))
        assert mirror.get("r1").state == "running"  # type: ignore[union-attr]
        # A reconnect's notify_all reads everything again: a deleted run goes.
        store.delete("r2")
        notify_all(store)
        await until(lambda: mirror.get("r2") is None)
        assert [r.run_id for r in mirror.runs()] == ["r1"]
    finally:
        await asyncio.to_thread(mirror.close)
    assert not mirror.active()
    assert not any(t.name == "nbdurable-record-mirror" for t in threading.enumerate())


async def test_the_wrapped_store_hands_every_returned_record_to_the_mirror() -> None:
    store: Any = nd.InMemorySessionStore()
    mirror = RecordMirror(store, store)
    await mirror.start()
    try:
        wrapped: Any = MirroredRuntimeStore(store, mirror)
        stored, _ = wrapped.rt_insert(submitted("w1"), enqueue=False, max_pending=10)
        assert mirror.get("w1") == stored
        wrapped.rt_update("w1", RunPatch(state="running", updated_at=NOW + 5))
        assert mirror.get("w1").state == "running"  # type: ignore[union-attr]
        task = submitted("t1").model_copy(update={"kind": "task"})
        wrapped.rt_insert(task, enqueue=False, max_pending=10)
        wrapped.rt_journal("t1", 0, '{"n": 2}', fence=0)
        assert mirror.task_state("t1") == '{"n": 2}'
    finally:
        await asyncio.to_thread(mirror.close)
