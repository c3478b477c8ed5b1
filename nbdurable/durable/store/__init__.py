"""The store seam: what a store is, in three base classes and one capability enum.

- :class:`HistoryStore`: checkpoints with their history (every bundled store).
- :class:`RunStore`: the runtime's run records, leases, intents and journal
  (the ``runtime`` capability).
- :class:`EventLog`: a per-run event log with offsets (the ``events`` capability).

A store subclasses the ones it implements and lists its :class:`Capability`
members in ``capabilities``; each optional method is declared on its base with
a default, so callers never probe a store for an attribute. The conformance
suite in :mod:`nbdurable.testing` proves a store against what it declares.
:class:`SessionStore` is the loop's minimum (``save`` and ``load``, sync or
async): any object with those two methods checkpoints a loop run. A store
composed from parts passes its run-record calls to one with
:class:`DelegatingRunStore`. A class that
cannot subclass a base (a proxy) may be registered as its virtual subclass
(``RunStore.register(Proxy)``); it then inherits no default and answers every
method itself.
"""

from ._capability import Capability
from ._checkpoints import (
    HISTORY,
    INCREMENTAL,
    MULTIPROCESS,
    PERSISTENT,
    REMOTE,
    RUNTIME,
    VERSIONED_SCHEMA,
    DurableSession,
    HistoryStore,
    SessionStore,
    maybe_await,
    supports,
)
from ._delegating import DelegatingRunStore
from ._events import (
    EVENTS,
    Armed,
    EventLog,
    EventStore,
    channel_of,
    notify,
    notify_all,
    refuse_fence,
    wait_for_events,
    watch,
)
from ._prune import PrunedRun, PruneReport, prune_runs
from ._runs import (
    COMMIT_CHANGES,
    RunStore,
    RuntimeStore,
    admitted,
    check_commit,
    repeated_submission,
)

__all__ = [
    "COMMIT_CHANGES",
    "EVENTS",
    "HISTORY",
    "INCREMENTAL",
    "MULTIPROCESS",
    "PERSISTENT",
    "REMOTE",
    "RUNTIME",
    "VERSIONED_SCHEMA",
    "Armed",
    "Capability",
    "DelegatingRunStore",
    "DurableSession",
    "EventLog",
    "EventStore",
    "HistoryStore",
    "PruneReport",
    "PrunedRun",
    "RunStore",
    "RuntimeStore",
    "SessionStore",
    "admitted",
    "channel_of",
    "check_commit",
    "maybe_await",
    "notify",
    "notify_all",
    "prune_runs",
    "refuse_fence",
    "repeated_submission",
    "supports",
    "wait_for_events",
    "watch",
]
