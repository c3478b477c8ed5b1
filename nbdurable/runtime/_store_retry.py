"""The runtime's store calls, retried through transient failures (``store_retry_ms``).

:class:`RetryingRuntimeStore` stands between the runtime and its store's run
records: every call is sent again while it fails for a connection-level reason
(:func:`~nbdurable.durable._transient.is_transient`), until the store has been
failing for ``store_retry_ms``; then :class:`StoreUnavailableError` says so, and
the engine stops (``on_fatal_error``) without touching the run that made the
call. A run therefore never fails because its store was briefly away.

A write whose connection broke may have committed before the error reached the
caller. Sending it again is harmless for every call here (each sets absolute
values, or is fenced, or upserts) except a submission, which would find its own
run id taken: :meth:`RetryingRuntimeStore.rt_insert` recognises its own run.
"""

from __future__ import annotations

from typing import Any

from .._errors import DurableConflictError
from ..durable._offload import NowaitDelegate
from ..durable._transient import StoreRetry, StoreUnavailableError, is_transient
from ..durable.store import RunStore
from ..runs import RuntimeRun

__all__ = ["RetryingRuntimeStore", "StoreUnavailableError"]


def _retried(name: str, label: str) -> Any:
    """The :class:`RunStore` method ``name``, sent again through an outage (``label`` in logs)."""

    def call(self: RetryingRuntimeStore, *args: Any, **kwargs: Any) -> Any:
        return self.retry.call(label, getattr(self.inner, name), *args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = getattr(RunStore, name).__doc__
    return call


class RetryingRuntimeStore(NowaitDelegate, RunStore):
    """A :class:`~nbdurable.durable.store.RunStore` whose calls are retried.

    On a store that runs calls on the event loop's thread (SQLite), the calls
    listed in ``nowait_methods`` run there as well when they need not wait: a
    failure that would be retried sends the call to a store thread instead,
    where the retry sleeps (see :class:`~nbdurable.durable._offload.NowaitDelegate`).

    Args:
        store: The store keeping the run records.
        retry: The retry policy (shared with the runtime's other store calls,
            so the budget counts one outage once).
    """

    nowait_methods = frozenset(
        {
            "rt_get",
            "rt_session",
            "rt_insert",
            "rt_update",
            "rt_claim",
            "rt_claim_many",
            "rt_renew",
            "rt_intent",
            "rt_intents",
            "rt_journal",
            "rt_journaled",
            "rt_verdict",
            "rt_claim_notices",
            "rt_grants",
            "rt_late_result",
        }
    )

    def __init__(self, store: RunStore, retry: StoreRetry) -> None:
        self.inner = store
        self.retry = retry

    def nowait_store(self) -> object:
        """The store behind the retries."""
        return self.inner

    def rt_insert(
        self, run: RuntimeRun, *, enqueue: bool, max_pending: int
    ) -> tuple[RuntimeRun, bool]:
        """Insert a submitted run; a retry that finds this very run stored returns it."""
        broken = False

        def attempt() -> tuple[RuntimeRun, bool]:
            nonlocal broken
            try:
                return self.inner.rt_insert(run, enqueue=enqueue, max_pending=max_pending)
            except DurableConflictError:
                if broken:  # the earlier try may have committed before its connection broke
                    found = self.inner.rt_get(run.run_id)
                    if found is not None and _same_submission(found, run):
                        return found, True
                raise
            except Exception as exc:
                broken = broken or is_transient(exc)
                raise

        return self.retry.call("submit a run", attempt)

    # Every other call is sent again as it is: each sets absolute values, is fenced
    # or upserts (a verdict, a grant, a late result or a notice claim sent again is
    # recognised as its own repeat). A graph's insertion found stored is settled by
    # the caller; a claim whose connection broke after it committed leaves that run
    # leased to this owner, claimed again once the lease lapses.
    rt_insert_many = _retried("rt_insert_many", "submit a graph")
    rt_get = _retried("rt_get", "read a run")
    rt_graph = _retried("rt_graph", "read a graph")
    rt_list = _retried("rt_list", "list runs")
    rt_session = _retried("rt_session", "read a session")
    rt_update = _retried("rt_update", "update a run")
    rt_claim = _retried("rt_claim", "claim a run")
    rt_claim_many = _retried("rt_claim_many", "claim runs")
    rt_renew = _retried("rt_renew", "renew a lease")
    rt_intent = _retried("rt_intent", "record a tool call")
    rt_intents = _retried("rt_intents", "read tool calls")
    rt_journal = _retried("rt_journal", "journal a model response")
    rt_journaled = _retried("rt_journaled", "read the journal")
    rt_verdict = _retried("rt_verdict", "record a verdict")
    rt_claim_notices = _retried("rt_claim_notices", "claim notifications")
    rt_grants = _retried("rt_grants", "record a grant")
    rt_late_result = _retried("rt_late_result", "record a late result")


def _same_submission(found: RuntimeRun, run: RuntimeRun) -> bool:
    return (
        found.agent_id == run.agent_id
        and found.agent_version == run.agent_version
        and found.prompt == run.prompt
        and found.created_at == run.created_at
        and found.request_id == run.request_id
    )
