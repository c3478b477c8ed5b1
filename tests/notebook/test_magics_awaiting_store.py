"""The magics with a store whose checkpoint calls really await (a network store, a lock).

The wrapped store is a real SQLite store whose ``save`` and ``load`` are
coroutine functions that yield to the event loop before answering, as a store
over a network does. A magic cannot ``await``, so it must wait for them without
blocking the kernel's loop: the runs on that loop keep going meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import nbdurable as nd
from nbdurable import AgentCheckpoint, open_store
from nbdurable.durable.store import EventLog, HistoryStore, RunStore
from nbdurable.notebook import NotebookSession, set_session

from .conftest import Output, Shown, eventually, greeter, janitor, lookup


class AwaitingStore:
    """A SQLite store whose ``save`` and ``load`` suspend before answering."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.suspended = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def save(self, checkpoint: AgentCheckpoint) -> None:
        await self._yield()
        self.inner.save(checkpoint)

    async def load(self, run_id: str, step_index: int | None = None) -> AgentCheckpoint | None:
        await self._yield()
        checkpoint: AgentCheckpoint | None = self.inner.load(run_id, step_index)
        return checkpoint

    async def _yield(self) -> None:
        self.suspended += 1
        await asyncio.sleep(0)


# It stands in for the store without subclassing the seam's bases: registered as a
# virtual subclass of each (it answers every other method through the SQLite store).
for _base in (HistoryStore, RunStore, EventLog):
    _base.register(AwaitingStore)


class AwaitingSession(NotebookSession):
    """A kernel session on an :class:`AwaitingStore`."""

    def __init__(self, store: AwaitingStore, **options: Any) -> None:
        super().__init__("sqlite:///runs.db", **options)
        self.awaiting = store

    @property
    def store(self) -> Any:
        return self.awaiting


@pytest.fixture
async def nb(tmp_path: Any) -> AsyncIterator[NotebookSession]:
    store = AwaitingStore(open_store(f"sqlite:///{tmp_path / 'runs.db'}"))
    session = AwaitingSession(store, poll_interval=0.01)
    previous = set_session(session)
    yield session
    await session.close()
    store.inner.close()
    set_session(previous)


def _status(nb: NotebookSession, run_id: str) -> str:
    return nb.runtime.runtime_store.rt_get(run_id).state  # type: ignore[union-attr]


async def test_approve_waits_for_the_store_and_the_run_goes_on(
    ip: Any, nb: AwaitingSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    ip.user_ns["greeter"] = greeter()
    submitted: Output = magic("agent", "janitor --run-id r1 --as run", "Clean up.")
    assert submitted.stderr == "" and views == [Shown("run", "r1")]
    await eventually(lambda: _status(nb, "r1") == "waiting_approval")
    magic("agent", "greeter --run-id g1", "Hi")  # a second run on the loop meanwhile

    before = nb.awaiting.suspended
    out = magic("durable", "approve r1")
    assert out.stderr == ""
    assert out.stdout.startswith("approved drop_table(name='stg_2023')")
    assert nb.awaiting.suspended > before  # the store's coroutine really suspended
    result = await ip.user_ns["run"].result()
    assert result.text == "Done: dropped stg_2023."
    await eventually(lambda: _status(nb, "g1") == "completed")


async def test_a_loop_api_run_is_found_through_the_awaiting_load(
    nb: AwaitingSession, magic: Any, views: list[Shown]
) -> None:
    model = nd.ScriptedModel([nd.Turn.call("lookup", "", table="t"), "done"])
    session = nd.DurableSession(nb.store, run_id="plain")
    await nd.generate_text(model=model, messages="x", tools=[lookup], session=session)
    out = magic("durable", "resume plain")
    assert "ran through generate_text/stream_chat" in out.stderr
    missing = magic("durable", "resume nowhere")
    assert "nowhere" in missing.stderr and "generate_text" not in missing.stderr


def test_without_a_running_loop_the_session_still_answers(tmp_path: Any) -> None:
    # a plain script: no loop runs in this thread, so the awaiting load runs on one
    store = AwaitingStore(open_store(f"sqlite:///{tmp_path / 'runs.db'}"))
    model = nd.ScriptedModel([nd.Turn.call("lookup", "", table="t"), "done"])
    session = nd.DurableSession(store.inner, run_id="plain")
    nd.run_sync(nd.generate_text(model=model, messages="x", tools=[lookup], session=session))
    notebook = AwaitingSession(store)
    assert notebook.has_checkpoints("plain") and not notebook.has_checkpoints("nowhere")
    assert store.suspended == 2
    store.inner.close()
