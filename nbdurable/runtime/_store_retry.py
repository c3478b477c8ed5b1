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

from collections.abc import Sequence

from .._errors import DurableConflictError
from ..durable._offload import NowaitDelegate
from ..durable._transient import StoreRetry, StoreUnavailableError, is_transient
from ..durable.store import RunStore
from ..runs import LateResult, RunPatch, RuntimeRun, Served, ToolIntent, Verdict

__all__ = ["RetryingRuntimeStore", "StoreUnavailableError"]


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
            "rt_update",
            "rt_claim",
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

    def rt_insert_many(self, runs: Sequence[RuntimeRun], *, max_pending: int) -> list[RuntimeRun]:
        """Insert a graph's runs (a retry that finds them stored is settled by the caller)."""
        return self.retry.call(
            "submit a graph", self.inner.rt_insert_many, runs, max_pending=max_pending
        )

    def rt_get(self, run_id: str) -> RuntimeRun | None:
        """The record of a run, or None."""
        return self.retry.call("read a run", self.inner.rt_get, run_id)

    def rt_graph(self, graph_id: str) -> list[RuntimeRun]:
        """The runs of a graph, in submission order."""
        return self.retry.call("read a graph", self.inner.rt_graph, graph_id)

    def rt_list(self, states: Sequence[str] | None = None) -> list[RuntimeRun]:
        """Records in submission order, optionally only those in ``states``."""
        return self.retry.call("list runs", self.inner.rt_list, states)

    def rt_session(self, session_id: str, states: Sequence[str]) -> list[RuntimeRun]:
        """One session's records in ``states``, in submission order."""
        return self.retry.call("read a session", self.inner.rt_session, session_id, states)

    def rt_update(self, run_id: str, patch: RunPatch, *, fence: int | None = None) -> RuntimeRun:
        """Apply ``patch`` to a run record (fenced)."""
        return self.retry.call("update a run", self.inner.rt_update, run_id, patch, fence=fence)

    def rt_claim(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        agents: Served,
        kind: str = "agent",
    ) -> RuntimeRun | None:
        """Take the next eligible run.

        A claim whose connection broke after it committed leaves that run
        leased to this owner; it is claimed again when the lease lapses.
        """
        return self.retry.call(
            "claim a run", self.inner.rt_claim, owner, now, lease_ms, agents, kind
        )

    def rt_renew(
        self, run_id: str, owner: str, fence: int, until: int, *, lease_ms: int | None = None
    ) -> bool:
        """Extend a held lease; False when it is not ours any more."""
        return self.retry.call(
            "renew a lease", self.inner.rt_renew, run_id, owner, fence, until, lease_ms=lease_ms
        )

    def rt_intent(self, intent: ToolIntent, *, fence: int) -> None:
        """Write or complete a tool intent, fenced."""
        self.retry.call("record a tool call", self.inner.rt_intent, intent, fence=fence)

    def rt_intents(self, run_id: str) -> list[ToolIntent]:
        """A run's tool intents."""
        return self.retry.call("read tool calls", self.inner.rt_intents, run_id)

    def rt_journal(self, run_id: str, step_index: int, response: str, *, fence: int) -> None:
        """Record a step's completed model response, fenced."""
        self.retry.call(
            "journal a model response",
            self.inner.rt_journal,
            run_id,
            step_index,
            response,
            fence=fence,
        )

    def rt_journaled(self, run_id: str, step_index: int) -> str | None:
        """A step's journaled model response."""
        return self.retry.call("read the journal", self.inner.rt_journaled, run_id, step_index)

    def rt_verdict(self, run_id: str, verdict: Verdict, *, now: int) -> tuple[RuntimeRun, bool]:
        """Record a verdict; a verdict sent again is recognised as its own repeat."""
        return self.retry.call("record a verdict", self.inner.rt_verdict, run_id, verdict, now=now)

    def rt_claim_notices(self, run_id: str, keys: Sequence[str]) -> list[str]:
        """Claim notifications (a claim whose reply was lost is not claimed twice)."""
        return self.retry.call("claim notifications", self.inner.rt_claim_notices, run_id, keys)

    def rt_grants(
        self, run_id: str, *, add: str | None = None, revoke: str | None = None, now: int
    ) -> RuntimeRun:
        """Add a grant token or revoke a grant id (both idempotent, so retried safely)."""
        return self.retry.call(
            "record a grant", self.inner.rt_grants, run_id, add=add, revoke=revoke, now=now
        )

    def rt_late_result(self, run_id: str, late: LateResult, *, now: int) -> RuntimeRun:
        """Add a late result (idempotent: the same one again changes nothing)."""
        return self.retry.call(
            "record a late result", self.inner.rt_late_result, run_id, late, now=now
        )


def _same_submission(found: RuntimeRun, run: RuntimeRun) -> bool:
    return (
        found.agent_id == run.agent_id
        and found.agent_version == run.agent_version
        and found.prompt == run.prompt
        and found.created_at == run.created_at
        and found.request_id == run.request_id
    )
