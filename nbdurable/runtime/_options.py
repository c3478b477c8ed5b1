"""The options of ``DurableRuntime``: their types, their meaning and their defaults."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Required, TypedDict

from .._deps import Deps
from ..durable._signer import ApprovalSigner
from ..durable._transient import DEFAULT_STORE_RETRY_MS
from ..durable.store import HistoryStore
from ._agent import Agent
from ._limits import DEFAULT_MAX_CONCURRENT_RUNS as RUNS_AT_ONCE
from ._limits import Limits
from ._notify import Notifier
from ._seam import Engine, FatalHandler
from ._tasks import TaskDefinition

__all__ = ["APPROVAL_MAX_AGE_MS", "DEFAULTS", "RuntimeOptions"]

APPROVAL_MAX_AGE_MS = 7 * 24 * 3600 * 1000
"""The default maximum age of an approval token a verdict may carry: 7 days."""

DEFAULTS: dict[str, Any] = {
    "agents": (),
    "tasks": (),
    "max_concurrent_runs": RUNS_AT_ONCE,
    "max_concurrent_tasks": 4,
    "lease_ms": 30_000,
    "poll_interval": 0.05,
    "idle_poll_interval": 1.0,
    "flush_interval": 0.05,
    "store_retry_ms": DEFAULT_STORE_RETRY_MS,
    "approval_max_age_ms": APPROVAL_MAX_AGE_MS,
    "record_mirror": True,
}
"""The :class:`RuntimeOptions` a runtime is not given, in one place (the others default to None)."""


class RuntimeOptions(TypedDict, total=False):
    """The options of ``DurableRuntime(...)`` and ``DurableRuntime.open(...)``.

    Attributes:
        store: A store that keeps run records (``open_store('sqlite:///...')``,
            ``'postgresql://...'``, ``'memory://'``). Required.
        agents: The agents this runtime executes (more: ``register_agents``).
        tasks: The custom tasks it executes (:func:`~nbdurable.runtime._tasks.task`).
        max_concurrent_runs: Agent runs executing at once (100; docs/runtime.md says why).
        max_concurrent_tasks: Custom-task phases executing at once, apart from runs (4).
        limits: The runtime's :class:`~nbdurable.runtime._limits.Limits`.
        on_fatal_error: Called once when the store stays away past ``store_retry_ms``
            (default: log it); the runtime stops taking work.
        approval_signer: Signs approval tokens (default: from the store, see
            ``DurableRuntime.signer``).
        lease_ms: How long a claim holds a run without renewal (30 s).
        poll_interval: Seconds between looks for work and between waits' polls (0.05).
        idle_poll_interval: Seconds between looks for work while idle, over a store
            that notifies claimable work (PostgreSQL: a submission, a verdict or a
            release wakes the runtime at once): 1.0. Lease expiries and retry waits
            are noticed within it. Other stores poll every ``poll_interval``.
        flush_interval: Seconds between flushes of streamed deltas to the event log (0.05).
        deps: Clock, ids and logger (default: the real ones).
        owner_id: This runtime's name in leases (default: generated).
        engine: Where runs execute (default: :class:`~nbdurable.runtime._engine.EmbeddedEngine`).
        store_retry_ms: How long a store call failing for a connection-level
            reason is sent again (60 s).
        approval_max_age_ms: Approval tokens this old or older are refused when a
            verdict comes in (``Run.approve``, a card, ``%durable approve``, the CLI,
            the bridge): the request stays pending and ``Run.pending_approvals``
            shows it again with a fresh token. 7 days; None: no limit.
        notify: Posts a signed message when a run this runtime executes starts
            waiting on a human (:class:`~nbdurable.runtime._notify.Notifier`): one
            per approval across every runtime on the store. None: no messages.
        record_mirror: Over a remote store, keep an in-memory mirror of the run
            records for synchronous reads on the loop (True).
    """

    store: Required[HistoryStore]
    agents: Iterable[Agent]
    tasks: Sequence[TaskDefinition]
    max_concurrent_runs: int
    max_concurrent_tasks: int
    limits: Limits | None
    on_fatal_error: FatalHandler | None
    approval_signer: ApprovalSigner | None
    lease_ms: int
    poll_interval: float
    idle_poll_interval: float
    flush_interval: float
    deps: Deps | None
    owner_id: str | None
    engine: Engine | None
    store_retry_ms: int
    approval_max_age_ms: int | None
    notify: Notifier | None
    record_mirror: bool
