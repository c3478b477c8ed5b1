"""``Run.wait_sync`` / ``result_sync`` called from another thread while the runtime's loop
is busy: the loop's thread runs a cell's synchronous code, or joins that very thread.

The wait polls the store from the calling thread, so its timeout holds whatever the
loop does, and a thread the loop's thread joins can still finish. (A run the blocked
loop itself executes cannot move meanwhile: that wait ends by its timeout.)
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime

BUSY = 5.0  # seconds the loop's thread is held: far longer than any timeout below


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table (a human approves each call)."""
    return f"dropped {name}"


def agents() -> list[Agent]:
    talker = Agent("talker", nd.ScriptedModel(["hello"] * 5, mode="sequential"), version="1")
    model = nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), "done"])
    return [talker, Agent("janitor", model, [drop_table], version="1")]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_database"))
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/runs.db"


class Waiter:
    """A thread that makes one blocking call; what it returned or raised, and how long it took."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.outcome: Any = None
        self.elapsed: float | None = None
        self._call = call
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        try:
            self.outcome = self._call()
        except BaseException as exc:
            self.outcome = exc
        self.elapsed = time.monotonic() - started

    def start_and_join_on_the_loop(self) -> None:
        """Start it, then block the loop's thread in ``join`` (as a cell calling ``join()``)."""
        self.thread.start()
        self.thread.join(timeout=BUSY)


async def settle(waiter: Waiter) -> None:
    """Let a waiter that outlived the join finish (today's code), so the runtime closes."""
    for _ in range(600):
        if not waiter.thread.is_alive():
            return
        await asyncio.sleep(0.05)


async def test_a_timeout_from_a_thread_holds_while_the_loop_is_busy(store_url: str) -> None:
    async with await DurableRuntime.open(store=nd.open_store(store_url), agents=agents()) as rt:
        run = await rt.submit("talker", "Hi.")  # cannot start: the loop is held from here on
        waiter = Waiter(lambda: run.result_sync(timeout=0.5))
        waiter.start_and_join_on_the_loop()
        try:
            assert not waiter.thread.is_alive(), "the wait outlived its timeout by seconds"
            assert isinstance(waiter.outcome, TimeoutError), waiter.outcome
            assert waiter.elapsed is not None and waiter.elapsed < 2.5
            assert run.run_id in str(waiter.outcome) and "after 0.5 s" in str(waiter.outcome)
        finally:
            await settle(waiter)
        assert (await run.result()).text == "hello"  # the run went on once the loop was free


async def test_a_wait_without_timeout_from_a_thread_the_loop_joins_returns(
    store_url: str,
) -> None:
    async with await DurableRuntime.open(store=nd.open_store(store_url), agents=agents()) as rt:
        done = await rt.submit("talker", "Hi.")
        await done.result()
        asking = await rt.submit("janitor", "Clean up.")
        await asking.wait("waiting_approval")
        for call, expected in [
            (lambda: done.result_sync().text, "hello"),
            (lambda: done.wait_sync().state, "completed"),
            (lambda: type(asking.result_sync()).__name__, "WaitingForHumanError"),
        ]:
            waiter = Waiter(call)
            waiter.start_and_join_on_the_loop()  # no deadlock: the thread reads the store
            try:
                assert not waiter.thread.is_alive(), "the thread and the loop wait for each other"
                outcome = waiter.outcome
                shown = type(outcome).__name__ if isinstance(outcome, Exception) else outcome
                assert shown == expected
                assert waiter.elapsed is not None and waiter.elapsed < 2.5
            finally:
                await settle(waiter)


async def test_a_thread_waits_for_a_run_the_free_loop_executes(store_url: str) -> None:
    async with await DurableRuntime.open(store=nd.open_store(store_url), agents=agents()) as rt:
        run = await rt.submit("talker", "Hi.")
        result = await asyncio.to_thread(run.result_sync, timeout=30)
        assert result.text == "hello"
        asking = await rt.submit("janitor", "Clean up.")
        record = await asyncio.to_thread(asking.wait_sync, "waiting_approval", timeout=30)
        assert record.state == "waiting_approval"
        await asking.approve()
        assert (await asyncio.to_thread(asking.result_sync, timeout=30)).text == "done"
