"""What engines, run handles and the executor use of a runtime: two typed bundles.

:class:`~nbdurable.runtime.runtime.DurableRuntime` is the front door users hold;
the parts that execute and handle runs do not import it. They take

- :class:`RunRecords`: the store (run records, events, checkpoints), its retry,
  the clock, ``deps``, and the record writes that keep records and events in
  step (``set_state``, ``state_event``, ``wake``); the helpers that only read
  and write records (claims, leases, state events, first messages) need no more;
- :class:`RunServices`: that, plus the definitions (agents, tasks), the limits,
  the approval signer and the timings: what an engine, a :class:`~nbdurable.Run`
  handle and the executor's :class:`~nbdurable.runtime.executor.RunContext` use.

Both are protocols: the runtime satisfies them, and so can a test's or another
host's object. :class:`RuntimeOptions` is the one list of the runtime's
constructor options, shared by ``DurableRuntime(...)`` and ``DurableRuntime.open(...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Required, TypedDict

if TYPE_CHECKING:
    from .._deps import Deps
    from ..durable.runtime_run import RuntimeRun
    from ..durable.runtime_store import RuntimeStore
    from ..durable.signer import ApprovalSigner
    from ..durable.store import HistoryStore
    from ..durable.transient import StoreRetry
    from ..events.log import FencedEventStore
    from .agent import Agent, Registry
    from .engine import Engine
    from .limits import Limits
    from .notify import Notifier
    from .prompts import Prompt
    from .record_mirror import RecordMirror
    from .run import Run
    from .tasks import TaskDefinition

__all__ = ["FatalHandler", "RunRecords", "RunServices", "RuntimeOptions"]

FatalHandler = Callable[[BaseException], Any]
"""Called once when the store stays unavailable past ``store_retry_ms``."""


class RuntimeOptions(TypedDict, total=False):
    """The options of ``DurableRuntime(...)`` and ``DurableRuntime.open(...)``.

    Attributes:
        store: A store that keeps run records (``open_store('sqlite:///...')``,
            ``'postgresql://...'``, ``'memory://'``). Required.
        agents: The agents this runtime executes (more: ``register_agents``).
        tasks: The custom tasks it executes (:func:`~nbdurable.runtime.tasks.task`).
        max_concurrent_runs: Agent runs executing at once (default 4).
        max_concurrent_tasks: Custom-task phases executing at once, apart from runs (4).
        limits: The runtime's :class:`~nbdurable.runtime.limits.Limits`.
        on_fatal_error: Called once when the store stays away past ``store_retry_ms``
            (default: log it); the runtime stops taking work.
        approval_signer: Signs approval tokens (default: from the store, see
            ``DurableRuntime.signer``).
        lease_ms: How long a claim holds a run without renewal (30 s).
        poll_interval: Seconds between looks for work and between waits' polls (0.05).
        flush_interval: Seconds between flushes of streamed deltas to the event log (0.05).
        deps: Clock, ids and logger (default: the real ones).
        owner_id: This runtime's name in leases (default: generated).
        engine: Where runs execute (default: :class:`~nbdurable.runtime.engine.EmbeddedEngine`).
        store_retry_ms: How long a store call failing for a connection-level
            reason is sent again (60 s).
        approval_max_age_ms: Approval tokens this old are refused (7 days; None: no limit).
        notify: Posts a signed message when a run starts waiting on a human.
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
    flush_interval: float
    deps: Deps | None
    owner_id: str | None
    engine: Engine | None
    store_retry_ms: int
    approval_max_age_ms: int | None
    notify: Notifier | None
    record_mirror: bool


class RunRecords(Protocol):
    """A store's run records and events, with the writes that keep them in step.

    Attributes:
        runtime_store: The run records (calls retried through an outage).
        event_store: The event log (fenced appends).
        store_retry: The retry budget every store call shares.
        mirror: Over a remote store, the in-memory copy synchronous reads use.
        deps: Clock, ids and logger.
        lease_ms: How long a claim holds a run without renewal.
        poll_interval: Seconds between polls.
    """

    runtime_store: RuntimeStore
    event_store: FencedEventStore
    store_retry: StoreRetry
    mirror: RecordMirror | None
    deps: Deps
    lease_ms: int
    poll_interval: float

    @property
    def store(self) -> HistoryStore:
        """The bundled store (checkpoints, notifications, capabilities)."""
        ...

    def now(self) -> int:
        """The clock, epoch ms."""
        ...

    def set_state(
        self,
        run_id: str,
        fence: int | None = None,
        *,
        finish: dict[str, Any] | None = None,
        **changes: Any,
    ) -> RuntimeRun:
        """Write a run-state change and its events (events first, fenced by ``fence``)."""
        ...

    def state_event(
        self,
        record: RuntimeRun,
        *,
        finish: dict[str, Any] | None = None,
        fence: int | None = None,
    ) -> None:
        """Append a ``run_state`` event for the record's current state."""
        ...

    def wake(self) -> None:
        """Make the engine look for work now; safe from any thread."""
        ...


class RunServices(RunRecords, Protocol):
    """What an engine, a run handle and the executor use: records and definitions.

    Attributes:
        registry: The registered agents, by id and version.
        tasks: The custom tasks, by name.
        limits: The runtime's limits.
        engine: Where runs execute (its ``name`` is recorded on submitted runs).
        owner_id: The name this runtime's leases are held under.
        flush_interval: Seconds between flushes of streamed deltas.
        max_concurrent_runs: Agent runs an engine executes at once.
        max_concurrent_tasks: Custom-task phases an engine executes at once.
        approval_max_age_ms: Approval tokens this old are refused (None: no limit).
        notify: Posts a message when a run starts waiting on a human (None: none).
        on_fatal_error: Called once when the store stays away past its retry budget.
    """

    registry: Registry
    tasks: dict[str, TaskDefinition]
    limits: Limits
    engine: Engine
    owner_id: str
    flush_interval: float
    max_concurrent_runs: int
    max_concurrent_tasks: int
    approval_max_age_ms: int | None
    notify: Notifier | None
    on_fatal_error: FatalHandler | None

    @property
    def signer(self) -> ApprovalSigner:
        """The approval signer."""
        ...

    def task_keys(self) -> list[tuple[str, str]]:
        """``(name, version)`` of the tasks executed now (their agents registered)."""
        ...

    def cancel_local(self, run_id: str) -> bool:
        """Cancel this process's execution of a run, if it has one."""
        ...

    async def cancel_owned(self, run_id: str) -> None:
        """Cancel the unfinished agent runs a task run spawned."""
        ...

    async def submit(
        self,
        agent_id: str,
        prompt: Prompt,
        *,
        request_id: str | None = None,
        timeout: float | None = None,
        run_id: str | None = None,
        max_steps: int | None = None,
        _owner_run_id: str | None = None,
    ) -> Run:
        """Submit a run of a registered agent (a task phase's spawned runs)."""
        ...
