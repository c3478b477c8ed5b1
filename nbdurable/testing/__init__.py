"""The store conformance suite: what a store must pass for the bases and capabilities it declares.

A store subclasses the bases of :mod:`nbdurable.durable.store` it implements
(:class:`~nbdurable.durable.store.HistoryStore`, and
:class:`~nbdurable.durable.store.RunStore` and :class:`~nbdurable.durable.store.EventLog`
when it keeps run records and an event log) and lists its
:class:`~nbdurable.durable.store.Capability` members. It proves itself with
this suite, which needs pytest (``import nbdurable`` never imports it): a test
module imports the suite's tests and fixtures and defines ``store``, a fresh
empty store per test (and optionally ``reopen``, another handle on the same
data, for the tests of persistence and racing handles)::

    import pytest
    from nbdurable.testing import *  # noqa: F403  (the suite: its tests and fixtures)

    from mypackage import MyStore


    @pytest.fixture
    def store(tmp_path):
        store = MyStore(tmp_path / "db")
        yield store
        store.close()


    @pytest.fixture
    def reopen(tmp_path):
        return lambda: MyStore(tmp_path / "db")

Each test skips a store that does not declare what it tests (run records:
``runtime``; the event log: ``events``; writes together: ``commit``), and fails
when a store declares a capability without honouring it. The bundled stores run the same suite
(``tests/stores/test_suite.py``).
"""

from . import _checkpoints, _claims, _commit, _events, _late_results, _notices, _settling, _verdicts
from ._commit import committing
from ._fixtures import Reopen, event_store, reopen, require, runtime_store, store

_MODULES = (_checkpoints, _claims, _commit, _events, _late_results, _notices, _settling, _verdicts)
_TESTS = {
    name: value
    for module in _MODULES
    for name, value in vars(module).items()
    if name.startswith("test_")
}
"""Every test of the suite, by name: each ``test_`` function of its modules (a new one joins)."""
globals().update(_TESTS)

__all__ = [
    "Reopen",
    "committing",
    "event_store",
    "reopen",
    "require",
    "runtime_store",
    "store",
    *sorted(_TESTS),
]
