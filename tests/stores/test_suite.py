"""The conformance suite of :mod:`nbdurable.testing`, run over every bundled store.

As a third-party store's tests do: the suite's tests and fixtures come in by
one import, and this module defines ``store`` (one fresh store per backend of
the registry in ``conftest.py``, PostgreSQL on a real server) and ``reopen``.
"""

from collections.abc import Callable, Iterator

import pytest

import nbdurable as nd
from nbdurable.testing import *  # noqa: F403

from .conftest import StoreCase


@pytest.fixture
def store(any_store: nd.HistoryStore) -> nd.HistoryStore:
    return any_store


@pytest.fixture
def reopen(
    store_case: StoreCase, any_store: nd.HistoryStore
) -> Iterator[Callable[[], nd.HistoryStore]]:
    if store_case.backend.name == "memory":  # one process: the same object
        yield lambda: any_store
        return
    opened: list[nd.HistoryStore] = []

    def another() -> nd.HistoryStore:
        opened.append(store_case.open())
        return opened[-1]

    yield another
    for handle in opened:  # closing twice is harmless: a test may close its own
        handle.close()
