"""A runtime run on SQLite makes its store calls on the event loop's thread when they need not wait.

The runtime's views of its store (the retrying one, a run owner's pending writes,
the run's context) hand their calls to the SQLite store's ``run_without_waiting``
scope, as the session store's own writes are: a steady step costs no thread
round trip. Real conditions: another process holding the file's write lock (the
calls then wait on store threads while the loop keeps ticking), statements'
threads read from the connections' trace callbacks.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from support.sqlite_locker import LockAtCall, hold_write_lock
from support.ticker import Ticker

import nbdurable as nd
from nbdurable.durable._offload import WOULD_WAIT, NowaitDelegate, offload, run_without_waiting
from nbdurable.events import TOOL_CALL
from nbdurable.runtime import Agent, DurableRuntime
from nbdurable.stores._check import check_store

HOLD = 2.0


def _agent(steps: int, tool: nd.Tool) -> Agent:
    turns = [nd.Turn.call("probe", i=i) for i in range(steps)] + ["all probed"]
    return Agent("prober", nd.ScriptedModel(turns), [tool], version="1", max_steps=steps + 1)


def _threads(store: nd.SqliteSessionStore) -> dict[str, list[int]]:
    """The thread of every statement each of the store's two connections runs."""
    seen: dict[str, list[int]] = {"thread": [], "nowait": []}
    # BEGIN/COMMIT of a read snapshot are not store calls of their own: not counted
    store._db.conn.set_trace_callback(
        lambda sql: sql in ("BEGIN", "COMMIT") or seen["thread"].append(threading.get_ident())
    )
    assert store._db.nowait_conn is not None
    store._db.nowait_conn.set_trace_callback(lambda _: seen["nowait"].append(threading.get_ident()))
    return seen


async def _run(store: nd.SqliteSessionStore, agent: Agent) -> nd.RunResult:
    async with await DurableRuntime.open(store=store, agents=[agent]) as runtime:
        run = await runtime.submit("prober", "Probe everything.")
        return await run.result()


@pytest.mark.parametrize("steps", [4, 16])
async def test_a_runtime_steps_store_calls_run_on_the_loops_thread(
    tmp_path: Path, steps: int
) -> None:
    store = nd.SqliteSessionStore(tmp_path / "runs.db")
    seen = _threads(store)

    @nd.tool
    def probe(i: int) -> str:
        """Probe once."""
        return f"probed {i}"

    result = await _run(store, _agent(steps, probe))
    assert result.text == "all probed"
    loop = threading.get_ident()
    on_threads = [t for t in seen["thread"] if t != loop]
    # A steady step's writes and reads ran here (before: about seven calls, some
    # thirty statements, a step on store threads); left on threads: the run's
    # start and end, and now and then a call that met a checkpoint of the log.
    assert set(seen["nowait"]) == {loop}
    assert len(seen["nowait"]) > 20 * steps
    assert len(on_threads) < 60 + 3 * steps, len(on_threads)
    store.close()


async def test_a_write_lock_held_by_another_process_sends_runtime_calls_to_store_threads(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(db)
    seen = _threads(store)
    loop = asyncio.get_running_loop()
    lock = LockAtCall(db, HOLD, lambda i: f"probed {i}")

    with Ticker() as ticker:
        result = await _run(store, _agent(5, lock.tool))
        ended = loop.time()
    assert result.text == "all probed"
    assert lock.holder is not None and lock.holder.wait(timeout=30) == 0
    # The calls after the lock waited for it on store threads; the loop ticked on.
    assert ended - lock.locked_at > HOLD * 0.6
    assert ticker.worst < HOLD / 4, ticker.worst
    assert set(seen["thread"]) - {threading.get_ident()}
    run_id = store.rt_list()[0].run_id
    events = store.read_events(run_id)
    assert [e.offset for e in events] == list(range(1, len(events) + 1))
    assert sorted(e.step_index or 0 for e in events if e.type == TOOL_CALL) == list(range(5))
    assert store.rt_get(run_id).state == "completed"  # type: ignore[union-attr]
    store.close()
    assert check_store(f"sqlite:///{db}").clean


def _checkpoint(step: int) -> nd.AgentCheckpoint:
    return nd.AgentCheckpoint(
        run_id="r",
        step_id=f"r#{step}",
        step_index=step,
        status="running",
        created_at=1_700_000_000_000 + step,
        messages=(nd.user("hi"), nd.assistant(f"step {step}")),
    )


async def test_a_call_that_would_wait_midway_leaves_what_committed_and_goes_to_a_thread(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    store = nd.SqliteSessionStore(db)
    holders: list[object] = []

    def two_saves() -> str:
        store.save(_checkpoint(0))
        if not holders:  # the second save finds another process's write lock
            holders.append(hold_write_lock(db, 0.5))
        store.save(_checkpoint(1))
        return "saved"

    # Here: the first save commits, the second would wait, so nothing is returned
    # but WOULD_WAIT (no busy error, no retry's sleep on this thread).
    assert run_without_waiting(store, two_saves) is WOULD_WAIT
    assert [i.step_index for i in store.history("r")] == [0]
    # The caller then runs the call again, whole, on a store thread.
    assert await offload(two_saves) == "saved"
    assert [i.step_index for i in store.history("r")] == [0, 0, 1]
    assert holders[0].wait(timeout=30) == 0  # type: ignore[attr-defined]
    store.close()


class _Front(NowaitDelegate):
    nowait_methods = frozenset({"listed"})

    def __init__(self, store: nd.SqliteSessionStore) -> None:
        self.store = store

    def nowait_store(self) -> object:
        return self.store

    def listed(self) -> int:
        return threading.get_ident()

    def unlisted(self) -> int:
        return threading.get_ident()


class _Overriding(_Front):
    def listed(self) -> int:
        return threading.get_ident()


async def test_only_the_listed_methods_of_the_class_itself_run_on_the_loops_thread(
    tmp_path: Path,
) -> None:
    store = nd.SqliteSessionStore(tmp_path / "runs.db")
    here = threading.get_ident()
    front = _Front(store)
    assert await offload(front.listed) == here
    assert await offload(front.unlisted) != here
    assert await offload(_Overriding(store).listed) != here  # an override is not vetted
    full = nd.SqliteSessionStore(tmp_path / "full.db", synchronous="FULL")
    assert await offload(_Front(full).listed) != here  # a store that syncs: never here
    full.close()
    store.close()


class _HeldClaims(nd.SqliteSessionStore):
    """A store whose claims wait for a signal (an override: its calls run on store threads)."""

    def __init__(self, path: Path, started: threading.Event, go: threading.Event) -> None:
        super().__init__(path)
        self.started = started
        self.go = go

    def rt_claim_many(self, *args: Any, **kwargs: Any) -> Any:  # the engine claims its slots
        self.started.set()
        self.go.wait(30)
        return super().rt_claim_many(*args, **kwargs)


async def test_a_run_claimed_while_the_runtime_closes_goes_back_pending(tmp_path: Path) -> None:
    started, go = threading.Event(), threading.Event()
    store = _HeldClaims(tmp_path / "runs.db", started, go)
    rt = await DurableRuntime.open(store=store, agents=[_agent(1, _probe)])
    assert await asyncio.to_thread(started.wait, 30)  # the scheduler's claim is under way
    # Submitted through a store of its own: this store's thread is the held claim's.
    submitter = nd.SqliteSessionStore(tmp_path / "runs.db")
    run = await DurableRuntime(store=submitter, agents=[_agent(1, _probe)]).submit(
        "prober", "Probe everything."
    )
    submitter.close()
    closing = asyncio.ensure_future(rt.close())
    await asyncio.sleep(0.2)  # close() has cancelled the scheduler, whose claim still runs
    go.set()  # the claim takes the run, after its caller was cancelled
    await closing
    record = store.rt_get(run.run_id)
    assert record is not None
    assert (record.state, record.lease_owner) == ("pending", None)  # not running, leased to none
    store.close()


@nd.tool
def _probe(i: int) -> str:
    """Probe once."""
    return f"probed {i}"
