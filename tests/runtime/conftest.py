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
    """A settable clock in epoch milliseconds (for retry deadlines)."""

    t: int = 1_800_000_000_000

    def now(self) -> int:
        return self.t

    def advance(self, ms: int) -> None:
        self.t += ms


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
