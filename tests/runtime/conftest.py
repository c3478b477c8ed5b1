"""Runtime test fixtures: every test runs on each store that keeps run records.

``store_url`` is parametrised over ``memory://``, ``sqlite:///<tmp>/runs.db`` and
a fresh PostgreSQL database (``pg_database``, from ``tests/conftest.py``);
``store`` is the store it opens, closed after the test; ``reopen(store)`` gives
a second handle on the same data, the way a second process would open it (a
new connection or pool for SQLite and PostgreSQL; the same object for the
in-memory store, which lives only in this process).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from support.waiting import eventually as eventually  # re-exported for the tests here

import nbdurable as nd
from nbdurable.models._base import ModelRequest, ModelResponse

STORE_KINDS = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=STORE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_database"))
    return f"sqlite:///{tmp_path}/runs.db"


@pytest.fixture
def store(store_url: str) -> Iterator[Any]:
    opened = nd.open_store(store_url)
    yield opened
    opened.close()


@pytest.fixture
def reopen(store_url: str) -> Iterator[Callable[[Any], Any]]:
    """Open the same store again (a second process's view of it)."""
    extra: list[Any] = []

    def _reopen(store: Any) -> Any:
        if store_url == "memory://":
            return store
        second = nd.open_store(store_url)
        extra.append(second)
        return second

    yield _reopen
    for second in extra:
        second.close()


@dataclass
class FakeClock:
    """A controllable clock in epoch milliseconds: time moves only when a test moves it.

    Given to a runtime as :meth:`deps` (its ``now`` and its ``sleep``), it drives the
    retry deadlines, the embedded engine's polls and the lease renewals: a sleep of
    the runtime returns when :meth:`advance` has moved the clock past its end, never
    on the wall clock (temporalio's time-skipping environment, in small).
    """

    t: int = 1_800_000_000_000
    sleepers: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)

    def now(self) -> int:
        return self.t

    def deps(self) -> nd.Deps:
        """Dependencies whose clock and timer are this clock."""
        return nd.Deps(clock=self, sleep=self.sleep)

    async def sleep(self, seconds: float) -> None:
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sleeper = (self.t + max(round(seconds * 1000), 1), woken)
        self.sleepers.append(sleeper)
        try:
            await woken
        finally:
            self.sleepers.remove(sleeper)

    def advance(self, ms: int) -> None:
        """Move the clock on by ``ms``, ending the sleeps due by then."""
        self.t += ms
        for due, waiting in self.sleepers:
            if due <= self.t and not waiting.done():
                waiting.set_result(None)

    async def skip(self, ms: int, idle: int = 1) -> None:
        """Move the clock on by ``ms`` and let the runtime look at the new time.

        Waits until ``idle`` sleeps are pending (the engine's scheduler between
        two looks: one), moves the clock, ends every pending sleep (the engine
        looks for work now rather than up to a poll interval later, a lease
        keeper renews) and returns once they sleep again: a run not due yet is
        then still waiting, deterministically, with no wall-clock pause.
        """
        await eventually(lambda: self._asleep() >= idle)
        self.t += ms
        for _, waiting in self.sleepers:
            if not waiting.done():
                waiting.set_result(None)
        await eventually(lambda: self._asleep() >= idle)

    def _asleep(self) -> int:
        return sum(not waiting.done() for _, waiting in self.sleepers)


@dataclass
class GatedModel(nd.ScriptedModel):
    """A ScriptedModel whose every call first waits for ``gate`` (when set) and
    sleeps ``delay`` seconds; ``active``/``peak`` count calls in flight."""

    delay: float = 0.0
    gate: asyncio.Event | None = None
    active: int = field(default=0, init=False)
    peak: int = field(default=0, init=False)
    entered: int = field(default=0, init=False)

    async def _enter(self) -> None:
        self.entered += 1
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.delay:
                await asyncio.sleep(self.delay)
        finally:
            self.active -= 1

    async def generate(self, request: ModelRequest) -> ModelResponse:
        await self._enter()
        return await super().generate(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        # agents stream by default when the model can: gate that path the same way
        await self._enter()
        async for event in super().stream(request):
            yield event


class GenerateOnlyModel:
    """A model that can only ``generate`` (it cannot stream)."""

    def __init__(self, turns: list[Any]) -> None:
        self._inner = nd.ScriptedModel(turns)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        return await self._inner.generate(request)


async def states_of(store: Any, run_id: str) -> list[str]:
    """The run's ``run_state`` events, in order."""
    events = await nd.read_events(store, run_id)
    return [e.payload["state"] for e in events if e.type == "run_state"]
