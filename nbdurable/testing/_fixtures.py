"""The fixtures the conformance suite's tests take, and the one a store's author writes.

``store`` is the author's: a fresh, empty store for each test. ``reopen`` is
optional: another handle on the same data (what another process would open),
for the tests of racing handles and of persistence; the default gives the
same object again, as an in-process store would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ..durable.store import Capability, EventLog, HistoryStore, RunStore, supports
from ..runs import RuntimeRun

__all__ = ["Reopen", "event_store", "reopen", "require", "runtime_store", "store"]

Reopen = Callable[[], Any]
"""Opens another handle on the store under test."""

NOW = 1_800_000_000_000
"""The suite's clock (epoch ms)."""


def new_run(run_id: str = "r1", **fields: Any) -> RuntimeRun:
    """A pending run record of agent ``a`` 1 in session ``s-<run_id>``; ``fields`` override."""
    values: dict[str, Any] = {
        "agent_id": "a",
        "agent_version": "1",
        "session_id": f"s-{run_id}",
        "prompt": '"hi"',
        "state": "pending",
        "created_at": NOW,
        "updated_at": NOW,
    }
    return RuntimeRun(run_id=run_id, **{**values, **fields})


@pytest.fixture
def store() -> HistoryStore:
    """Replace this fixture: a fresh, empty store of the kind under test (closed after)."""
    raise pytest.UsageError(
        "define a `store` fixture in the module that imports nbdurable.testing's suite"
    )


@pytest.fixture
def reopen(store: HistoryStore) -> Reopen:
    """Another handle on ``store``'s data; by default the same object (an in-process store)."""
    return lambda: store


@pytest.fixture
def runtime_store(store: HistoryStore) -> Any:
    """``store`` when it keeps run records (the runtime capability); else the test skips."""
    require(store, Capability.RUNTIME)
    assert isinstance(store, RunStore), "a store declaring `runtime` subclasses RunStore"
    return store


@pytest.fixture
def event_store(store: HistoryStore) -> Any:
    """``store`` when it keeps an event log (the events capability); else the test skips."""
    require(store, Capability.EVENTS)
    assert isinstance(store, EventLog), "a store declaring `events` subclasses EventLog"
    return store


def require(store: object, capability: Capability) -> None:
    """Skip the calling test unless ``store`` declares ``capability``."""
    if not supports(store, capability):
        pytest.skip(f"{type(store).__name__} does not declare {capability.value!r}")
