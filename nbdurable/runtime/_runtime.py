"""DurableRuntime: submit runs and let the runtime own them (the embedded asyncio engine)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Unpack, cast

from .._deps import Deps, new_id
from .._errors import (
    ConfigurationError,
    DurableConflictError,
    FencedOutError,
    RunNotFoundError,
)
from .._resources import ResourceScope
from ..durable._offload import offload
from ..durable._signer import ApprovalSigner, store_signer
from ..durable._transient import StoreRetry
from ..durable.store import EventLog, HistoryStore, RunStore, notify
from ..events._fork import fork_run
from ..messages import Message
from ..runs import (
    HUMAN_STATES,
    TERMINAL_STATES,
    UNFINISHED_STATES,
    UNSET,
    RunPatch,
    RuntimeRun,
    claimed_user,
    valid_name,
)
from ..tracing import current_trace_context
from ._agent import Agent, Registry
from ._engine import EmbeddedEngine
from ._graphs import Graph, GraphNode
from ._limits import Limits, check_concurrency, check_max_age_ms, check_retry_ms
from ._notify import Notifier
from ._options import DEFAULTS, RuntimeOptions
from ._prompts import Prompt
from ._record_mirror import mirror_for, read_graph, read_list, with_mirror
from ._run import Run
from ._seam import Engine
from ._state_events import (
    RecentIds,
    StateWriteProgress,
    settled_nodes,
    state_events,
    unclaimed_event,
)
from ._store_retry import RetryingRuntimeStore
from ._submissions import agent_record, insert, submit_graph, submit_task
from ._tasks import TaskDefinition, TaskRun, task_table

__all__ = ["DurableRuntime", "RuntimeOptions"]


class DurableRuntime:
    """Owns runs: schedules them, executes them on this event loop, recovers them.

    Open it with :meth:`open` (an async context manager). Runs are executed by
    one owner at a time (a lease with a fencing token in the store), so several
    runtimes or ``nbdurable worker`` processes can share one store.

    Execution sits behind an engine seam: ``engine=`` defaults to
    :class:`~nbdurable.runtime._engine.EmbeddedEngine` (asyncio tasks on the running
    loop); another engine (:mod:`nbdurable.temporal`) exposes the same run states.

    A store call that fails for a connection-level reason (the PostgreSQL
    server restarting, SQLite's write lock held past its busy timeout) is sent
    again with backoff for up to ``store_retry_ms`` (default 60 s); a run never
    fails because of it. When the store stays unavailable longer, the runtime
    calls ``on_fatal_error`` once, stops taking work and leaves its runs as
    they are, for another worker or the next open.

    Attributes:
        store: The store (a bundled store with the ``runtime`` capability).
        runtime_store: The store's run records, its calls retried (``store_retry_ms``).
        event_store: The store's event log.
        limits: The runtime's limits.
        owner_id: This runtime's name in leases (held as
            ``f"{owner_id}@{host}:{pid}#{boot id}/{pid namespace}/{start time}"``,
            see :mod:`nbdurable.runs`).
        approval_max_age_ms, notify: As given (:class:`RuntimeOptions`).
        mirror: Over a remote store (PostgreSQL), the in-memory copy of the run
            records synchronous reads on the loop use (docs/runtime.md, "What
            blocks"); None on local stores and with ``record_mirror=False``.
    """

    def __init__(self, **options: Unpack[RuntimeOptions]) -> None:
        unknown = sorted(set(options) - set(RuntimeOptions.__annotations__))
        if unknown:
            # what Python says of an unknown keyword, as when these were parameters
            raise TypeError(f"DurableRuntime got unexpected options: {', '.join(unknown)}")
        if "store" not in options:
            raise TypeError("DurableRuntime needs store= (there is no default store)")
        store = options["store"]
        if not (
            isinstance(store, HistoryStore)
            and isinstance(store, RunStore)
            and isinstance(store, EventLog)
        ):
            raise ConfigurationError(
                "DurableRuntime needs a store that keeps run records: "
                "open_store('sqlite:///...'), 'postgresql://...' or 'memory://'"
            )
        options = cast(RuntimeOptions, {**DEFAULTS, **options})
        self.tasks: dict[str, TaskDefinition] = task_table(options["tasks"])
        self.store: HistoryStore = store
        # The store as each of the bases checked above: run records, fenced events.
        records: RunStore = store
        self.event_store: EventLog = store
        self.max_concurrent_runs = check_concurrency(
            "max_concurrent_runs", options["max_concurrent_runs"]
        )
        self.max_concurrent_tasks = check_concurrency(
            "max_concurrent_tasks", options["max_concurrent_tasks"]
        )
        limits = options.get("limits")
        self.limits = limits if limits is not None else Limits()
        if not isinstance(self.limits, Limits):
            raise ConfigurationError("limits must be a Limits")
        self.on_fatal_error = options.get("on_fatal_error")
        self.lease_ms = options["lease_ms"]
        self.poll_interval = options["poll_interval"]
        self.idle_poll_interval = options["idle_poll_interval"]
        self.flush_interval = options["flush_interval"]
        self.deps = options.get("deps") or Deps()
        store_retry_ms = check_retry_ms(options["store_retry_ms"])
        # Store calls that fail for connection-level reasons are sent again for up
        # to store_retry_ms (one budget per outage, shared by every call); past
        # it the engine stops (on_fatal_error) and leaves its runs as they are.
        self.store_retry = StoreRetry.for_store(store, store_retry_ms, self.deps.logger)
        self.runtime_store: RunStore = RetryingRuntimeStore(records, self.store_retry)
        # Over a remote store, synchronous reads on the loop read a mirror of the records.
        self.mirror = mirror_for(store, records) if options["record_mirror"] else None
        self.runtime_store = with_mirror(self.runtime_store, self.mirror)
        self.owner_id = options.get("owner_id") or f"runtime-{new_id()[:12]}"
        self._signer = options.get("approval_signer")
        self.approval_max_age_ms = check_max_age_ms(options["approval_max_age_ms"])
        notify = options.get("notify")
        if notify is not None and not isinstance(notify, Notifier):
            raise ConfigurationError("notify must be a Notifier")
        self.notify = notify
        self.registry = Registry()
        self.pending_written = RecentIds()
        self.new_sessions = RecentIds()
        self.registry.register(options["agents"])
        engine = options.get("engine")
        self.engine: Engine = engine if engine is not None else EmbeddedEngine()
        # Connections its tools open lazily (MCP sessions): one per server, closed by close().
        self.resources = ResourceScope()
        self._started = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle -----------------------------------------------------------------

    @classmethod
    async def open(cls, **options: Unpack[RuntimeOptions]) -> DurableRuntime:
        """Open a runtime and start its scheduler on the running event loop.

        The options are those of the class (:class:`RuntimeOptions`).
        Validation is eager: invalid options and registrations raise here.
        """
        return await cls(**options).__aenter__()

    async def __aenter__(self) -> DurableRuntime:
        if not self._started:
            self._loop = asyncio.get_running_loop()
            if self.mirror is not None:
                await self.mirror.start()
            with self.resources.active():  # the engine's tasks inherit the scope
                self.engine.start(self)
            self._started = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop taking work; abandon in-flight steps cleanly and release their leases.

        Nothing is marked failed that was not: runs this runtime was executing
        go back to ``pending`` for the next owner (or the next open).
        """
        if self._started:
            await self.engine.close()
        if self.mirror is not None:
            await offload(self.mirror.close)
        await self.resources.aclose()
        if self.notify is not None:  # messages in flight, each bounded by its attempts
            await self.notify.aclose(timeout=30.0)

    def now(self) -> int:
        """The runtime clock, epoch ms."""
        return int(self.deps.clock.now())

    @property
    def signer(self) -> ApprovalSigner:
        """The approval signer.

        Passed in, or from ``NBDURABLE_APPROVAL_SECRET``, or a 0600 file created
        on first use: beside a SQLite or JSONL store, ``~/.nbdurable/approval.key``
        for a PostgreSQL store (workers on several machines need the environment
        variable), and for an in-memory store one secret per store object.
        """
        if self._signer is None:
            self._signer = store_signer(self.store)
        return self._signer

    # -- registrations -------------------------------------------------------------------

    def register_agents(self, agents: Iterable[Agent]) -> None:
        """Validate the whole batch, then add it (running work is not affected).

        Raises:
            ConfigurationError: An invalid registration (nothing is added).
            DurableConflictError: An id twice in the batch, or an (id, version)
                already registered with another definition.
        """
        self.registry.register(agents)
        self.engine.wake()

    def unregister_agent(self, agent_id: str) -> bool:
        """Remove an idle registration; True if it existed. History is kept.

        Raises:
            DurableConflictError: A run still needs the agent.
        """
        busy = [
            r.run_id
            for r in self.runtime_store.rt_list(sorted(UNFINISHED_STATES))
            if (r.kind == "agent" and r.agent_id == agent_id)
            or (r.kind == "task" and agent_id in self._task_agents(r.agent_id))
        ]
        if busy:
            raise DurableConflictError(
                f"agent {agent_id!r} is needed by unfinished runs: {', '.join(busy[:5])}"
            )
        return self.registry.remove(agent_id)

    def _task_agents(self, task_name: str) -> tuple[str, ...]:
        task = self.tasks.get(task_name)
        return task.agents if task is not None else ()

    def task_keys(self) -> list[tuple[str, str]]:
        """``(name, version)`` of the tasks this runtime executes now.

        A task that declares ``agents`` is executed only while all of them are
        registered (a recovered task waits for the host to restore them).
        """
        ids = set(self.registry.ids())
        return [
            (task.name, task.version)
            for task in self.tasks.values()
            if all(agent_id in ids for agent_id in task.agents)
        ]

    # -- runs ------------------------------------------------------------------------------

    async def submit(
        self,
        agent_id: str,
        prompt: Prompt,
        *,
        session_id: str | None = None,
        request_id: str | None = None,
        enqueue: bool = False,
        timeout: float | None = None,
        run_id: str | None = None,
        max_steps: int | None = None,
        submitted_by: str | None = None,
        _owner_run_id: str | None = None,
    ) -> Run:
        """Submit a run of a registered agent; returns its handle at once.

        Args:
            agent_id: A registered agent (its latest version is captured).
            prompt: A nonblank string or a user message.
            session_id: The conversation: its runs execute one after another,
                each starting from the latest completed history. Default: a new one.
            request_id: Deduplication key: an equivalent prompt returns the original run.
            enqueue: Queue behind an unfinished run of the session instead of failing.
            timeout: Seconds until the run fails with reason ``timeout``.
            run_id: The run's id (default: generated).
            max_steps: This run's step budget (default: the agent's ``max_steps``).
            submitted_by: Who submits it (default: the name this process claims,
                ``NBDURABLE_USER`` or the OS user); recorded on the run.

        Raises:
            ConfigurationError: An unknown agent, an invalid prompt or ``max_steps``,
                a blank ``submitted_by``.
            DurableConflictError: A busy session without ``enqueue``, or a
                request id reused for a different prompt.
            LimitExceededError: Too many unfinished runs, or the prompt is too large.
        """
        record = agent_record(
            self.registry,
            self.limits,
            self.now,
            agent_id,
            prompt,
            run_id=run_id,
            session_id=session_id,
            request_id=request_id,
            timeout=timeout,
            max_steps=max_steps,
        )
        if session_id is None and run_id is None:  # a new session of a new random id
            self.new_sessions.add(record.session_id)
        by = claimed_user() if submitted_by is None else valid_name(submitted_by, "submitted_by")
        record = RunPatch(engine=self.engine.name, submitted_by=by).apply(record)
        if _owner_run_id is not None:
            record = RunPatch(owner_run_id=_owner_run_id).apply(record)
        trace_context = current_trace_context()  # the caller's span becomes the run's parent
        if trace_context is not None:
            record = RunPatch(trace_context=trace_context).apply(record)
        limit = self.limits.max_pending_runs
        return Run(self, (await insert(self, record, enqueue=enqueue, max_pending=limit)).run_id)

    async def submit_graph(
        self, nodes: Iterable[GraphNode | Mapping[str, Any]], *, graph_id: str | None = None
    ) -> Graph:
        """Submit a DAG of agent runs; returns the graph's handle at once.

        Each node (a :class:`~nbdurable.runtime._graphs.GraphNode` or a dict with
        its fields: ``id``, ``agent``, ``prompt``, ``depends_on``,
        ``on_dependency_failure``, ``timeout``, ``max_steps``) becomes a run with
        id ``f"{graph_id}:{node_id}"`` in a session of its own. A node waits
        ``queued`` until its dependencies complete, then starts with their result
        texts appended to its prompt. When a dependency fails or is cancelled, the
        node fails (``on_dependency_failure="fail"``, reason ``dependency_failed``)
        or waits in ``needs_attention`` (``"pause"``) until the dependency is
        retried and completes. Submitting an existing ``graph_id`` again with the
        same nodes returns the original graph.

        Raises:
            ConfigurationError: An unknown agent or dependency, a cycle, a
                repeated node id, an invalid prompt (nothing is written).
            DurableConflictError: ``graph_id`` names a different graph.
            LimitExceededError: Too many unfinished runs, or a prompt too large.
        """
        return await submit_graph(self, nodes, graph_id)

    def graph(self, graph_id: str) -> Graph:
        """Re-attach to a graph of the store, from any process.

        Raises:
            RunNotFoundError: The store has no such graph.
        """
        if not read_graph(self, graph_id):
            raise RunNotFoundError(graph_id)
        return Graph(self, graph_id)

    async def submit_task(
        self,
        name: str,
        input: Any = None,
        *,
        request_id: str | None = None,
        run_id: str | None = None,
        timeout: float | None = None,
    ) -> TaskRun:
        """Submit a run of a custom task (defined at open); returns its handle at once.

        Args:
            name: A task given to ``open(tasks=[...])``.
            input: JSON data: the state the first phase gets.
            request_id: Deduplication key: the same input returns the original run.
            run_id: The task run's id (default: generated).
            timeout: Seconds until the task fails with reason ``timeout``.

        Raises:
            ConfigurationError: An unknown task, input that is not JSON, or a
                declared agent that is not registered.
            DurableConflictError: A request id reused for a different input.
            LimitExceededError: ``max_pending_tasks`` unfinished tasks, or the
                input is too large.
        """
        return await submit_task(
            self, name, input, request_id=request_id, run_id=run_id, timeout=timeout
        )

    async def cancel_owned(self, run_id: str) -> None:
        """Cancel the unfinished agent runs a task run spawned."""
        for record in await offload(self.runtime_store.rt_list, sorted(UNFINISHED_STATES)):
            if record.owner_run_id == run_id:
                await Run(self, record.run_id).cancel()

    async def get_run(self, run_id: str) -> Run:
        """Re-attach to any run of the store, from any process.

        Raises:
            RunNotFoundError: The store has no such run.
        """
        record = await offload(self.runtime_store.rt_get, run_id)
        if record is None:
            raise RunNotFoundError(run_id)
        return TaskRun(self, run_id) if record.kind == "task" else Run(self, run_id)

    async def fork(
        self,
        run_id: str,
        step_index: int,
        *,
        new_run_id: str | None = None,
        edit: Message | str | None = None,
    ) -> Run:
        """Fork a run from one of its checkpoints and let this runtime continue the fork.

        As :func:`nbdurable.inspect.rewind`, with this runtime's signer: the fork
        starts from the history as of ``step_index`` (its last message replaced
        by ``edit`` when given) and runs under the parent's agent and version,
        in a session of its own. The original run is never modified.

        Raises:
            RunNotFoundError: The runtime has no record of ``run_id``.
            CheckpointNotFoundError: The run has no checkpoint at ``step_index``.
        """
        if await offload(self.runtime_store.rt_get, run_id) is None:
            raise RunNotFoundError(run_id)
        signer = await offload(lambda: self.signer)  # may create its key file
        fork = await offload(
            fork_run,
            self.store,
            run_id,
            step_index,
            new_run_id=new_run_id,
            edit=edit,
            signer=signer,
        )
        self.engine.wake()
        return Run(self, fork.run_id)

    def list_runs(self, status: str | Sequence[str] | None = None) -> list[RuntimeRun]:
        """Run records in submission order, optionally only those in ``status``.

        Over a remote store (PostgreSQL), called on an event loop's thread,
        this reads the runtime's mirror of the records (see docs/runtime.md).
        """
        states = [status] if isinstance(status, str) else status
        return read_list(self, states)

    async def resume(self) -> None:
        """Pick up recovered work now (restored registrations make it eligible)."""
        self.engine.wake()

    def state_event(
        self,
        record: RuntimeRun,
        *,
        finish: dict[str, Any] | None = None,
        fence: int | None = None,
    ) -> bool:
        """Append a ``run_state`` event for the record's current state; whether it was.

        A final state is followed, in the same append, by the run's terminal
        event (:func:`terminal_event`), so the terminal event is the last one
        the run writes while it is final.

        Args:
            record: The run as it is (or is about to be) stored.
            finish: The ``run_finished`` payload of the leg that completed it.
            fence: The owner's fencing token: the append is refused
                (:class:`~nbdurable.FencedOutError`) once another owner holds the run.
        """
        events = state_events(record, self.now(), finish)
        fenced: dict[str, int] = {} if fence is None else {"fence": fence}
        try:
            self.store_retry.call(
                "write an event", self.event_store.append_events, record.run_id, events, **fenced
            )
        except FencedOutError:
            raise
        except Exception as exc:  # the record is the authority; the event is for viewers
            self.deps.logger.error("nbdurable: state event of %s failed: %r", record.run_id, exc)
            notify(self.store, record.run_id)
            return False
        notify(self.store, record.run_id)
        return True

    def set_state(
        self,
        run_id: str,
        patch: RunPatch,
        *,
        fence: int | None = None,
        finish: dict[str, Any] | None = None,
        progress: StateWriteProgress | None = None,
    ) -> RuntimeRun:
        """Write a run-state change (and its event).

        A change of state writes its events first (fenced by ``fence``) and then
        the record, so whoever sees the record finds its event in the log: a
        crash in between leaves a run that is executed again, never a finished
        run whose log lacks its terminal event. ``finish`` is the
        ``run_finished`` payload of the leg that completed the run. ``progress``
        (given by a caller on the event loop's thread) skips what an earlier
        try of the same change wrote before it stopped (:class:`StateWriteProgress`).
        """
        progress = progress or StateWriteProgress()
        patch = RunPatch(updated_at=self.now()) | patch
        moves = patch.state is not UNSET
        if patch.state in TERMINAL_STATES:
            patch = RunPatch(retried=False) | patch  # a retry that ended before its leg began
        if moves and not progress.evented:
            current = self.runtime_store.rt_get(run_id)
            if current is None:
                raise RunNotFoundError(run_id)
            self.state_event(patch.apply(current), finish=finish, fence=fence)
            progress.evented = True
        record = progress.record or self.runtime_store.rt_update(run_id, patch, fence=fence)
        progress.record = record
        if self.notify is not None and patch.state in HUMAN_STATES:
            # before waking anyone: who sees the state finds its message in flight (drain)
            self.notify.schedule(self, record)
        if moves:
            notify(self.store, run_id)  # waiters woken by the events now see the record too
        elif not progress.evented:
            self.state_event(record)
            progress.evented = True
        if record.finished and moves:  # the store promoted the session's next run
            waiting = self.runtime_store.rt_session(record.session_id, sorted(UNFINISHED_STATES))
            made = [waiting[0]] if waiting and waiting[0].state == "pending" else []
            if record.graph_id is not None:  # ... and settled the graph's waiting nodes
                made += settled_nodes(self.runtime_store.rt_graph(record.graph_id), record)
            for run in made:
                if run.run_id not in progress.announced:
                    unclaimed_event(self, run)
                    progress.announced.add(run.run_id)
        self.wake()  # async callers run this method on a store thread
        return record

    def cancel_local(self, run_id: str) -> bool:
        """Cancel this runtime's execution of a run, if it has one."""
        return self.engine.cancel_local(run_id)

    def wake(self) -> None:
        """Make the engine look for work now; safe from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self.engine.wake()
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.engine.wake()
        else:  # a store thread: the engine's event belongs to its loop
            loop.call_soon_threadsafe(self.engine.wake)
