"""The engine seam: what an engine implements (:class:`Engine`) and what it is given.

Every engine (the embedded one in :mod:`nbdurable.runtime._engine`, Temporal in
:mod:`nbdurable.temporal`, the next one in a package of its own) subclasses
:class:`Engine`. The runtime hands it a :class:`RunServices`: the store's run
records and events, the writes that keep them in step, the clock, the
definitions, the limits and the signer. Engines, run handles and the executor
take these protocols, never :class:`~nbdurable.runtime._runtime.DurableRuntime`
(the front door users hold, which satisfies them):

- :class:`RunRecords`: the store (run records, events, checkpoints), its retry,
  the clock, ``deps``, and the record writes that keep records and events in
  step (``set_state``, ``state_event``, ``wake``); the helpers that only read
  and write records (claims, leases, state events, first messages) need no more;
- :class:`LegServices`: that, plus the limits: what the executor's
  :class:`~nbdurable.runtime._executor.RunContext` uses for one leg;
- :class:`RunControl`: the records, plus the definitions, the approval signer and
  the engine: what a :class:`~nbdurable.Run` handle (and a verdict, a grant, a
  graph) uses;
- :class:`RunServices`: all of these, plus the tasks and the timings: what an
  engine is given (:meth:`Engine.start`).

An engine joins the engine conformance suite (``tests/engines``) by one
parameter of its ``engine`` fixture; docs/architecture.md, "Where a new part goes".
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from .._deps import Deps
    from ..durable._signer import ApprovalSigner
    from ..durable._transient import StoreRetry
    from ..durable.store import EventLog, HistoryStore, RunStore
    from ..runs import RunPatch, RuntimeRun
    from ._agent import Registry
    from ._limits import Limits
    from ._notify import Notifier
    from ._prompts import Prompt
    from ._record_mirror import RecordMirror
    from ._run import Run
    from ._state_events import RecentIds, StateWriteProgress
    from ._tasks import TaskDefinition

__all__ = ["Engine", "FatalHandler", "LegServices", "RunControl", "RunRecords", "RunServices"]

FatalHandler = Callable[[BaseException], Any]
"""Called once when the store stays unavailable past ``store_retry_ms``."""


class RunRecords(Protocol):
    """A store's run records and events, with the writes that keep them in step."""

    runtime_store: RunStore  # the run records, calls retried through an outage
    event_store: EventLog  # the event log, fenced appends
    store_retry: StoreRetry  # the retry budget every store call shares
    pending_written: RecentIds  # runs submitted here whose pending event is written
    new_sessions: RecentIds  # sessions made here for a submission: no run before its first
    mirror: RecordMirror | None  # over a remote store, what synchronous reads read
    deps: Deps  # clock, ids, logger
    lease_ms: int
    poll_interval: float
    idle_poll_interval: float  # an idle scheduler's fallback poll, over a store notifying work

    @property
    def store(self) -> HistoryStore:
        """The bundled store (checkpoints, notifications, capabilities)."""

    def now(self) -> int:
        """The clock, epoch ms."""

    def set_state(
        self,
        run_id: str,
        patch: RunPatch,
        *,
        fence: int | None = None,
        finish: dict[str, Any] | None = None,
        progress: StateWriteProgress | None = None,
    ) -> RuntimeRun:
        """Write a run-state change and its events (events first, fenced by ``fence``)."""

    def state_event(
        self,
        record: RuntimeRun,
        *,
        finish: dict[str, Any] | None = None,
        fence: int | None = None,
    ) -> bool:
        """Append a ``run_state`` event for the record's current state; whether it was."""

    def wake(self) -> None:
        """Make the engine look for work now; safe from any thread."""


class LegServices(RunRecords, Protocol):
    """What one leg's execution uses (the executor's ``RunContext``): the records and the limits."""

    limits: Limits


class RunControl(RunRecords, Protocol):
    """What a :class:`~nbdurable.Run` handle uses: the records, and what verdicts and cancels need.

    The definitions a verdict's run is checked against, the approval signer and
    token age, and the engine a cancel (or a blocking wait) goes through.
    """

    registry: Registry
    engine: Engine
    approval_max_age_ms: int | None
    notify: Notifier | None

    @property
    def signer(self) -> ApprovalSigner:
        """The approval signer."""

    def cancel_local(self, run_id: str) -> bool:
        """Cancel this process's execution of a run, if it has one."""


class RunServices(LegServices, RunControl, Protocol):
    """What an engine uses: the records, the run handles' needs, the tasks and the timings.

    Its options are those of ``DurableRuntime`` (``RuntimeOptions``).
    """

    tasks: dict[str, TaskDefinition]
    owner_id: str
    flush_interval: float
    max_concurrent_runs: int
    max_concurrent_tasks: int
    on_fatal_error: FatalHandler | None

    def task_keys(self) -> list[tuple[str, str]]:
        """``(name, version)`` of the tasks executed now (their agents registered)."""

    async def cancel_owned(self, run_id: str) -> None:
        """Cancel the unfinished agent runs a task run spawned."""

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


class Engine(ABC):
    """Where a runtime's runs execute: the one seam every engine implements.

    What users do is not the engine's: the runtime and the run handle write it
    to the store (a submission inserts a ``pending`` record whose ``engine`` is
    this engine's :attr:`name`; an approval, a denial, a retry or a cancel
    changes the record) and then call :meth:`wake`. An engine executes records:

    - **Runs**: every claimable record of its name (``pending``, or ``running``
      under a lapsed lease) whose agent definition (id, version, fingerprint)
      or task the executing process has registered; a run recorded under
      another definition waits, never runs under this one (versions).
    - **States and events**: every change of state through
      :meth:`RunServices.set_state` (the events first, then the record), so
      any reader reconnects by offset (``read_events(after=N)``) the same way
      whatever engine executed the run; a finished run's terminal event is its
      last.
    - **Approvals**: a gated call parks the run (``waiting_for_approval``); the
      verdicts in the record decide it when the run executes again.
    - **Retries**: model attempts as the agent's ``model_retry`` says
      (``retry_wait`` between them), failures as ``failed`` with a reason.
    - **Tool recovery**: a tool call's intent is journaled before it runs; a
      call found interrupted by a takeover is run again (``safe``, and
      ``idempotent`` with the same idempotency key) or leaves the run in
      ``needs_attention`` (``manual``).
    - **Sub-agents, graphs, tasks**: a sub-agent's run is journaled with its
      parent; graph nodes are records the store promotes; a task's phases run
      from its last checkpoint.
    - **Drain** (:meth:`drain`) and **close** (:meth:`close`): stop taking work
      and hand runs back as they are; nothing is marked failed that was not.

    Attributes:
        name: What the runtime records as the ``engine`` of the runs it submits
            (``embedded``, ``temporal``): only engines of that name execute them.
    """

    name: ClassVar[str]

    @abstractmethod
    def start(self, runtime: RunServices) -> None:
        """Begin executing (or dispatching) the runtime's eligible runs, on the running loop."""

    @abstractmethod
    def wake(self) -> None:
        """Look for work now (a submission, a verdict, a retry, a new registration)."""

    @abstractmethod
    def cancel_local(self, run_id: str) -> bool:
        """Cancel this engine's execution of a run; False when it is not executing it.

        The record says ``cancelling`` already: an engine that executes runs
        elsewhere passes the cancellation on (and returns True).
        """

    def execution(self, run_id: str) -> asyncio.Future[None] | None:
        """What executes ``run_id`` in this process now, if anything (default: nothing).

        While it does, the run's state changes only by this process's writes,
        or when the execution ends: a waiter may wait for its end instead of
        being woken by every step's notification.
        """
        return None

    def home_loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop this engine executes runs on, if it executes them in this process.

        A blocking wait from another thread (``Run.wait_sync``) schedules its
        store polls on this loop; ``None`` (the default) when runs execute
        elsewhere (Temporal workers) or the engine has not started.
        """
        return None

    async def drain(self, seconds: float, interrupt: asyncio.Event | None = None) -> list[str]:
        """Stop taking work; let calls in flight finish for up to ``seconds``.

        Then (or once ``interrupt`` is set) the runs still executing are handed
        back as :meth:`close` does. The default suits an engine that executes
        nothing in this process (a client dispatching to workers, whose own
        shutdown drains them): nothing to wait for.

        Returns:
            The calls that were cut, as log labels (``run <id>: tool 'x' (call c)``).
        """
        return []

    @abstractmethod
    async def close(self) -> None:
        """Stop taking work; abandon in-flight steps cleanly, releasing their leases."""
