"""Event-log tests that need the registry: several processes, a second store object following live.

The event log's conformance tests ship in :mod:`nbdurable.testing` (``test_suite.py``).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.durable.store import MULTIPROCESS, PERSISTENT, supports
from nbdurable.events import EVENTS, NewEvent

from .conftest import StoreCase


def _store(case: StoreCase, *needs: str) -> nd.HistoryStore:
    store = case.open()
    for capability in (EVENTS, *needs):
        if not supports(store, capability):
            store.close()  # before skipping: a pool left to the garbage collector complains
            pytest.skip(f"{case.backend.name} does not declare {str(capability)!r}")
    return store


def new(kind: str, n: int = 0) -> NewEvent:
    return NewEvent(type=kind, step_index=n, payload={"n": n, "text": "é ✓"}, created_at=1000 + n)


def checkpoint(run_id: str, step: int) -> nd.AgentCheckpoint:
    return nd.AgentCheckpoint(
        run_id=run_id,
        step_index=step,
        status="running",
        messages=(nd.user("hi"), *(nd.assistant(f"step {i}") for i in range(step + 1))),
        created_at=step,
    )


@nd.tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def test_processes_appending_to_one_run_keep_offsets_gap_free(
    store_case: StoreCase, tmp_path: Path
) -> None:
    store = _store(store_case, MULTIPROCESS)
    code = (
        "import sys, nbdurable as nd\n"
        "from nbdurable.events import NewEvent\n"
        "s = nd.open_store(sys.argv[1])\n"
        "for i in range(25):\n"
        "    s.append_events('r', [NewEvent(type=sys.argv[2], created_at=i)])\n"
        "s.close()\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, store_case.url, f"p{n}"], stderr=subprocess.PIPE, text=True
        )
        for n in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    events = store.read_events("r")  # type: ignore[attr-defined]
    assert [e.offset for e in events] == list(range(1, 101))
    assert sorted({e.type for e in events}) == ["p0", "p1", "p2", "p3"]
    store.close()


@pytest.mark.spec("S004-01", "S004-02", "S004-03", "S004-17", "S004-18")
async def test_a_run_writes_its_log_and_a_second_store_object_follows_it_live(
    store_case: StoreCase,
) -> None:
    """The embedded stores keep a durable log
    (nbdurable differs from seed 004's local runtime), with the same reconnect API on every
    store: a subscriber on another store object follows a run live from offset 0."""
    store = _store(store_case, PERSISTENT)  # a second object sees the same data
    watcher_store = store_case.open()
    model = nd.ScriptedModel(
        [nd.Turn.call("lookup", "looking it up now", key="a"), "the answer is here"],
        stream_delay=0.005,
    )
    stream = nd.stream_chat(
        model=model, messages="go", tools=[lookup], session=nd.DurableSession(store, "r1")
    )
    while True:
        try:
            await nd.read_events(watcher_store, "r1")
            break
        except nd.RunNotFoundError:
            await asyncio.sleep(0.005)
    followed = [e async for e in nd.subscribe(watcher_store, "r1")]
    parts = [p async for p in stream.full_stream]
    assert followed == await nd.read_events(store, "r1")
    assert [p for p in (e.to_part() for e in followed) if p is not None] == parts
    assert nd.fold_events(followed).text == "the answer is here"
    watcher_store.close()
    store.close()


async def test_a_subscriber_in_another_process_sees_the_same_folded_state(
    store_case: StoreCase,
) -> None:
    """Two subscribers, one joining mid-run from another process, end with the same fold."""
    store = _store(store_case, MULTIPROCESS)
    model = nd.ScriptedModel(
        [nd.Turn.call("lookup", " ".join(f"w{i}" for i in range(30)), key="a"), "done now"],
        stream_delay=0.01,
    )
    stream = nd.stream_chat(
        model=model, messages="go", tools=[lookup], session=nd.DurableSession(store, "r1")
    )
    local = asyncio.create_task(_fold(nd.subscribe(store, "r1", wait=True)))
    await asyncio.sleep(0.1)  # join mid-run
    code = (
        "import asyncio, sys, json, nbdurable as nd\n"
        "async def main():\n"
        "    s = nd.open_store(sys.argv[1])\n"
        "    view = nd.fold_events([e async for e in nd.subscribe(s, 'r1', poll_interval=0.02)])\n"
        "    print(json.dumps({'text': view.text, 'status': view.status,"
        " 'last': view.last_offset, 'steps': len(view.steps)}))\n"
        "asyncio.run(main())\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        store_case.url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    await stream.result()
    view = await local
    import json

    remote = json.loads(out)
    assert remote == {
        "text": view.text,
        "status": view.status,
        "last": view.last_offset,
        "steps": len(view.steps),
    }
    assert view.text == "done now" and view.status == "completed"
    store.close()


async def _fold(events):  # type: ignore[no-untyped-def]
    return nd.fold_events([e async for e in events])


@pytest.mark.parametrize("count", [0, 1, 150])
def test_last_event_offset_and_events_since_on_every_store(
    store_case: StoreCase, count: int
) -> None:
    from nbdurable.durable.store._events import events_since

    store = _store(store_case)
    try:
        assert store.last_event_offset("nobody") == 0
        if count:
            store.append_events("r", [new("custom", i) for i in range(count)])
            store.save_with_events(checkpoint("r", 1), [new("checkpoint_saved", 1)])
            store.append_events("r", [new("custom", 2), new("custom", 3)])
            logged = store.read_events("r")
            assert store.last_event_offset("r") == logged[-1].offset == count + 3
            assert events_since(store, "r", "checkpoint_saved") == logged[count:]
            assert events_since(store, "r", "no_such_type") == logged
    finally:
        store.close()
