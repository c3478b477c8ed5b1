"""Custom durable tasks: phases checkpointed like steps, owned agent runs.

A task is a list of phases, ``async def phase(ctx, state) -> state``, run in
order by the runtime. The JSON state a phase returns is checkpointed (the run's
journal, fenced like every write of the run) before the next phase starts; a
crash mid-phase re-runs that phase from the last checkpointed state. A phase
spawns *owned* agent runs with :meth:`TaskContext.spawn_agent`: their ids are
deterministic (``f"{task_run_id}:{phase}:{n}"``), so a re-run phase re-attaches
to the children it spawned before instead of spawning them twice.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from ..durable._offload import offload
from ..durable.store import RuntimeStore, maybe_await
from ..events._model import NewEvent
from ..runs import ACTIVE_STATES, RunPatch, RuntimeRun
from ._limits import payload_bytes
from ._outcome import LegOutcome, RunTimedOut
from ._prompts import Prompt, validate_prompt
from ._record_mirror import read_list, read_task_state
from ._run import Run, RunResult

if TYPE_CHECKING:
    from ._seam import RunServices

__all__ = [
    "TASK_PHASE",
    "ContextFactory",
    "Phase",
    "TaskContext",
    "TaskDefinition",
    "TaskExecution",
    "TaskRun",
    "canonical_json",
    "define_task",
    "resume_point",
    "run_phase",
    "run_phases",
    "task_table",
]

TASK_PHASE = "task_phase"
"""Event type: a task phase completed and its state was checkpointed (payload
``phase``, ``index``)."""

Phase = Callable[["TaskContext", Any], Any]
"""``async def phase(ctx, state) -> state`` (the state is JSON data)."""


@dataclass(frozen=True, eq=False)
class TaskDefinition:
    """A custom task: named phases run in order, each checkpointed.

    Made with :func:`define_task`; passed to ``DurableRuntime.open(tasks=[...])``.

    Attributes:
        name: The task's unique name (what ``submit_task`` takes).
        phases: The phases, in order.
        version: Recorded with each task run; a run resumes only under its version.
        agents: The agent ids its phases spawn, when declared: a task run is
            submitted only, and executed only, while all of them are registered,
            and ``unregister_agent`` refuses them while such a run is unfinished.
    """

    name: str
    phases: tuple[Phase, ...]
    version: str = "1"
    agents: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"TaskDefinition({self.name!r}, phases={self.phase_names!r})"

    @property
    def phase_names(self) -> list[str]:
        """The phases' names (their ``__name__``), in order."""
        return [getattr(p, "__name__", repr(p)) for p in self.phases]

    def validate(self) -> None:
        """Check the definition eagerly.

        Raises:
            ConfigurationError: A blank name or version, no phases, a phase that
                is not callable, two phases with one name, or blank agent ids.
        """
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError(f"a task needs a nonblank name, not {self.name!r}")
        if not isinstance(self.version, str) or not self.version.strip():
            raise ConfigurationError(f"task {self.name!r} needs a nonblank version")
        if not self.phases:
            raise ConfigurationError(f"task {self.name!r} has no phases")
        for phase in self.phases:
            if not callable(phase):
                raise ConfigurationError(f"task {self.name!r}: phase {phase!r} is not callable")
        names = self.phase_names
        if len(set(names)) != len(names):
            raise ConfigurationError(
                f"task {self.name!r}: phase names must be unique, not {names!r}"
            )
        for agent_id in self.agents:
            if not isinstance(agent_id, str) or not agent_id.strip():
                raise ConfigurationError(f"task {self.name!r}: agent id {agent_id!r} is blank")


def define_task(
    name: str, *phases: Phase, version: str = "1", agents: Iterable[str] = ()
) -> TaskDefinition:
    """Define a custom durable task; pass it to ``DurableRuntime.open(tasks=[...])``.

    Each phase is ``async def phase(ctx: TaskContext, state) -> state``: it gets
    the previous phase's state (the task's input for the first) and returns the
    next, JSON data that is checkpointed before the next phase starts.

    Args:
        name: The task's unique name.
        *phases: The phases, in order (unique ``__name__``s).
        version: The definition's version, recorded with each run.
        agents: Agent ids the phases spawn (optional; see :class:`TaskDefinition`).

    Raises:
        ConfigurationError: An invalid definition.
    """
    task = TaskDefinition(name, tuple(phases), version, tuple(agents))
    task.validate()
    return task


def task_table(tasks: Sequence[Any]) -> dict[str, TaskDefinition]:
    """Validate the tasks given to ``open`` and key them by name.

    Raises:
        ConfigurationError: Not a :class:`TaskDefinition`, or a name twice.
    """
    table: dict[str, TaskDefinition] = {}
    for task in tasks:
        if not isinstance(task, TaskDefinition):
            raise ConfigurationError(
                f"tasks holds {task!r}: custom tasks are made with nbdurable.define_task()"
            )
        task.validate()
        if task.name in table:
            raise ConfigurationError(f"task {task.name!r} is defined twice")
        table[task.name] = task
    return table


class TaskContext:
    """What a phase gets besides its state.

    Attributes:
        runtime: The runtime executing the task.
        run_id: The task run.
        task: The task's definition.
        phase: The phase's name.
        phase_index: The phase's position (0-based).
    """

    def __init__(
        self,
        runtime: RunServices,
        run_id: str,
        task: TaskDefinition,
        phase_index: int,
        *,
        on_submitted: Callable[[Run], Awaitable[None]] | None = None,
    ) -> None:
        self.runtime = runtime
        # Where no scheduler runs in the phase's process, the engine starts an owned
        # run's execution itself when it is submitted (the Temporal worker starts its
        # workflow); the embedded engine's scheduler needs no such hook.
        self._on_submitted = on_submitted
        self.run_id = run_id
        self.task = task
        self.phase_index = phase_index
        self.phase = task.phase_names[phase_index]
        self._spawned = 0

    def spawn_agent(
        self,
        agent_id: str,
        prompt: Prompt,
        *,
        timeout: float | None = None,
        max_steps: int | None = None,
    ) -> Awaitable[RunResult]:
        """Start an owned run of a registered agent; await its result.

        The run's id (and request id) is ``f"{run_id}:{phase}:{n}"``, ``n``
        counting this phase's spawns from 0 in call order: when the phase runs
        again after a crash, the same calls re-attach to the runs already
        spawned (a finished one returns its result at once) instead of spawning
        twice. The prompt takes the shapes ``submit`` takes; the
        agent's ``stream``, approvals, retries and limits apply as to any run.

        Raises:
            ConfigurationError: The agent is not registered (or not among the
                task's declared ``agents``), or the prompt is invalid; raised
                here, at the call.
            RunFailedError: When awaited: the owned run failed or was cancelled.
        """
        n = self._spawned
        self._spawned += 1
        if self.task.agents and agent_id not in self.task.agents:
            raise ConfigurationError(
                f"task {self.task.name!r} phase {self.phase!r} spawns agent {agent_id!r}, "
                f"which is not among its declared agents {list(self.task.agents)!r}"
            )
        if self.runtime.registry.get(agent_id) is None:
            raise ConfigurationError(
                f"task {self.task.name!r} phase {self.phase!r} spawns agent {agent_id!r}, "
                "which is not registered: register it (register_agents) and retry the task"
            )
        checked = validate_prompt(prompt)
        child_id = f"{self.run_id}:{self.phase}:{n}"
        return self._spawn(agent_id, checked, child_id, timeout, max_steps)

    async def _spawn(
        self,
        agent_id: str,
        prompt: Prompt,
        child_id: str,
        timeout: float | None,
        max_steps: int | None,
    ) -> RunResult:
        run = await self.runtime.submit(
            agent_id,
            prompt,
            run_id=child_id,
            request_id=child_id,
            timeout=timeout,
            max_steps=max_steps,
            _owner_run_id=self.run_id,
        )
        if self._on_submitted is not None:
            await self._on_submitted(run)
        return await run.result()


@dataclass
class TaskExecution:
    """One execution of a claimed task run (the task twin of ``RunContext``).

    Attributes:
        runtime: The runtime executing it.
        task: The task's definition.
        record: The latest run record this owner wrote or read.
        stop: How the owner decided to end the execution it stops.
    """

    runtime: RunServices
    task: TaskDefinition
    record: RuntimeRun
    stop: LegOutcome | None = None

    @property
    def store(self) -> RuntimeStore:
        """The runtime's store."""
        return self.runtime.runtime_store

    @property
    def fence(self) -> int:
        """The fencing token this owner holds for the run."""
        return self.record.fence

    def update(self, patch: RunPatch) -> RuntimeRun:
        """A fenced write of the run record."""
        patch = RunPatch(updated_at=self.runtime.now()) | patch
        self.record = self.store.rt_update(self.record.run_id, patch, fence=self.fence)
        return self.record


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys (a task's input and checkpointed states).

    Raises:
        TypeError: ``value`` is not JSON data.
        ValueError: ``value`` is circular or holds NaN.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _json_state(task: TaskDefinition, phase: str, state: Any) -> str:
    try:
        return canonical_json(state)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"task {task.name!r} phase {phase!r} returned a state that is not JSON: {exc}"
        ) from None


ContextFactory = Callable[["RunServices", str, TaskDefinition, int], TaskContext]
"""Makes a phase's :class:`TaskContext` (an engine may hand phases its own subclass)."""


def resume_point(execution: TaskExecution) -> tuple[int, Any]:
    """The first phase still to run and the state it gets.

    The state is the last checkpointed one (the task's input before the first
    phase completes); the index is ``len(phases)`` once every phase completed.
    """
    task, run_id = execution.task, execution.record.run_id
    for index in reversed(range(len(task.phases))):
        saved = execution.store.rt_journaled(run_id, index)
        if saved is not None:
            return index + 1, json.loads(saved)
    return 0, json.loads(execution.record.prompt)


async def run_phase(
    execution: TaskExecution, index: int, state: Any, *, context: ContextFactory = TaskContext
) -> Any:
    """Run one phase on ``state`` and checkpoint the state it returns; that state.

    The checkpoint is the run's journal entry ``index`` (fenced), the record's
    ``phase`` counter and a :data:`TASK_PHASE` event.

    Raises:
        RunTimedOut: The task's deadline passed before the phase started.
        FencedOutError: Another owner took the run (its writes are refused).
        LimitExceededError: A state over ``max_payload_bytes``.
        ConfigurationError: A state that is not JSON.
    """
    runtime, task, run_id = execution.runtime, execution.task, execution.record.run_id
    deadline = execution.record.deadline_at
    if deadline is not None and runtime.now() >= deadline:
        raise RunTimedOut("the task's timeout passed")
    ctx = context(runtime, run_id, task, index)
    result = await maybe_await(task.phases[index](ctx, state))
    text = _json_state(task, ctx.phase, result)
    runtime.limits.check_payload(payload_bytes(text))
    await offload(execution.store.rt_journal, run_id, index, text, fence=execution.fence)
    await offload(execution.update, RunPatch(phase=index + 1))
    event = NewEvent(
        type=TASK_PHASE,
        created_at=runtime.now(),
        payload={"phase": ctx.phase, "index": index},
    )
    try:
        await offload(
            runtime.store_retry.call,
            "write an event",
            runtime.event_store.append_events,
            run_id,
            [event],
            fence=execution.fence,
        )
    except Exception as exc:  # the journal is the authority; the event is for viewers
        runtime.deps.logger.error("nbdurable: phase event of %s failed: %r", run_id, exc)
    return json.loads(text)


async def run_phases(execution: TaskExecution) -> Any:
    """Run the task's phases from the last checkpointed one; return the final state.

    Raises:
        RunTimedOut: The task's deadline passed between phases.
        FencedOutError: Another owner took the run (its writes are refused).
        LimitExceededError: A state over ``max_payload_bytes``.
        ConfigurationError: A state that is not JSON.
    """
    start, state = await offload(resume_point, execution)
    for index in range(start, len(execution.task.phases)):
        state = await run_phase(execution, index, state)
    return state


class TaskRun(Run):
    """A handle on a task run: a :class:`Run` whose result is the task's final state."""

    runtime: RunServices  # a task's cancel reaches the runs it spawned

    def __init__(self, runtime: RunServices, run_id: str) -> None:
        super().__init__(runtime, run_id)

    def __repr__(self) -> str:
        return f"TaskRun({self.run_id!r})"

    async def result(self) -> Any:
        """Wait for the task to finish; its final state (JSON data).

        Raises:
            RunFailedError: The task failed or was cancelled.
        """
        from ._run import RunFailedError

        record = await self.wait()
        if record.state != "completed":
            raise RunFailedError(record)
        return None if record.result_text is None else json.loads(record.result_text)

    def state(self) -> Any:
        """The last checkpointed state (the input before the first phase completes)."""
        record = self.record()
        saved = read_task_state(self.runtime, record)
        return json.loads(saved if saved is not None else record.prompt)

    def children(self) -> list[Run]:
        """The agent runs the task spawned (its owned runs), in submission order."""
        return [
            Run(self.runtime, r.run_id)
            for r in read_list(self.runtime)
            if r.owner_run_id == self.run_id
        ]

    async def cancel(self) -> None:
        """Cancel the task, and its unfinished owned runs."""
        executing = (await offload(self.record)).state in ACTIVE_STATES
        await super().cancel()
        if not executing:  # an executing task cancels them once its phase settles
            await self.runtime.cancel_owned(self.run_id)
