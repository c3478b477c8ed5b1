"""New run records, validated before anything is written: an agent run, a graph's nodes, a task.

What ``DurableRuntime.submit``, ``submit_graph`` and ``submit_task`` insert: the
registration or task definition it runs under, the canonical prompt or input
within the payload limit, the deadline and the step budget; and the insertion of
a graph's nodes and of a task run, with their first state events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._deps import new_id
from .._errors import ConfigurationError, DurableConflictError
from .._text import valid_text
from ..durable._offload import offload
from ..runs import RunPatch, RuntimeRun, claimed_user
from ._agent import Registry
from ._graphs import Graph, GraphNode, validate_graph
from ._limits import Limits, payload_bytes
from ._prompts import Prompt, canonical_prompt, validate_prompt
from ._state_events import StateEventWrites, unclaimed_event
from ._tasks import TaskDefinition, TaskRun, canonical_json

if TYPE_CHECKING:
    from ._seam import RunServices

__all__ = [
    "agent_record",
    "check_same_graph",
    "graph_records",
    "submit_graph",
    "submit_task",
    "task_record",
]

Clock = Callable[[], int]
"""The runtime's clock, epoch ms."""


def agent_record(
    registry: Registry,
    limits: Limits,
    clock: Clock,
    agent_id: str,
    prompt: Prompt,
    *,
    run_id: str | None,
    session_id: str | None,
    request_id: str | None,
    timeout: float | None,
    max_steps: int | None,
) -> RuntimeRun:
    """A new run record of a registered agent (its latest version), ``pending``.

    Raises:
        ConfigurationError: An unknown agent, an invalid prompt or ``max_steps``.
        LimitExceededError: The prompt is larger than ``max_payload_bytes``.
    """
    agent = registry.get(agent_id)
    if agent is None:
        raise registry.unknown(agent_id)
    if max_steps is not None and (
        isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1
    ):
        raise ConfigurationError(f"max_steps must be a positive integer, not {max_steps!r}")
    prompt = validate_prompt(prompt)
    text = canonical_prompt(prompt)
    limits.check_payload(payload_bytes(text))
    now = clock()
    new_run_id = run_id or f"run-{new_id()[:16]}"
    retry = agent.retry_policy
    return RuntimeRun(
        run_id=new_run_id,
        agent_id=agent.id,
        agent_version=str(agent.version),
        # ids follow the prompt's lone-surrogate policy (a resubmission maps alike)
        session_id=_valid_id(session_id) or f"session-{new_run_id}",
        request_id=_valid_id(request_id),
        prompt=text,
        state="pending",
        created_at=now,
        updated_at=now,
        deadline_at=None if timeout is None else now + int(timeout * 1000),
        retry_policy=retry.model_dump() if retry else None,
        stream=bool(agent.stream),
        max_steps=agent.max_steps if max_steps is None else max_steps,
        fingerprint=registry.fingerprint(agent.id, str(agent.version)),
        approvers=agent.approver_rule(),
        submitter_may_approve=agent.submitter_may_approve,
        agent_origin=agent.origin,
    )


def graph_records(
    registry: Registry, limits: Limits, clock: Clock, graph_id: str, nodes: Sequence[GraphNode]
) -> list[RuntimeRun]:
    """The run records of a validated graph's nodes, in the given (topological) order.

    Each node runs as ``f"{graph_id}:{node.id}"`` in a session of its own,
    ``queued`` when it has dependencies, else ``pending``.
    """
    records = []
    for node in nodes:
        record = agent_record(
            registry,
            limits,
            clock,
            node.agent,
            node.prompt,
            run_id=f"{graph_id}:{node.id}",
            session_id=None,
            request_id=None,
            timeout=node.timeout,
            max_steps=node.max_steps,
        )
        records.append(
            RunPatch(
                graph_id=graph_id,
                node_id=node.id,
                depends_on=[f"{graph_id}:{dep}" for dep in node.depends_on],
                on_dependency_failure=node.on_dependency_failure,
                state="queued" if node.depends_on else "pending",
            ).apply(record)
        )
    return records


def check_same_graph(
    graph_id: str, existing: Sequence[RuntimeRun], nodes: Sequence[GraphNode]
) -> None:
    """Check that a graph submitted again is the one stored under ``graph_id``.

    Raises:
        DurableConflictError: ``graph_id`` names a different graph.
    """
    known = {(r.node_id, r.agent_id, r.prompt) for r in existing}
    wanted = {(n.id, n.agent, canonical_prompt(n.prompt)) for n in nodes}
    if known != wanted:
        raise DurableConflictError(f"graph id {graph_id!r} was used for a different graph")


def task_record(
    task: TaskDefinition,
    registry: Registry,
    limits: Limits,
    clock: Clock,
    input: Any,
    *,
    request_id: str | None,
    run_id: str | None,
    timeout: float | None,
) -> RuntimeRun:
    """A new run record of a custom task, ``pending``; its prompt is the input's JSON.

    Raises:
        ConfigurationError: Input that is not JSON, or a declared agent that is
            not registered.
        LimitExceededError: The input is larger than ``max_payload_bytes``.
    """
    missing = [a for a in task.agents if registry.get(a) is None]
    if missing:
        raise ConfigurationError(
            f"task {task.name!r} spawns agents that are not registered: {', '.join(missing)}"
        )
    try:
        text = canonical_json(input)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"a task's input must be JSON data: {exc}") from None
    limits.check_payload(payload_bytes(text))
    now = clock()
    new_run_id = run_id or f"task-{new_id()[:16]}"
    return RuntimeRun(
        run_id=new_run_id,
        agent_id=task.name,
        agent_version=task.version,
        session_id=f"session-{new_run_id}",
        request_id=request_id,
        prompt=text,
        state="pending",
        created_at=now,
        updated_at=now,
        deadline_at=None if timeout is None else now + int(timeout * 1000),
        kind="task",
    )


def _valid_id(value: Any) -> Any:
    return valid_text(value) if isinstance(value, str) else value


async def submit_graph(
    runtime: RunServices,
    nodes: Iterable[GraphNode | Mapping[str, Any]],
    graph_id: str | None,
) -> Graph:
    """Insert a graph's nodes and their first state events (``DurableRuntime.submit_graph``)."""
    ordered = validate_graph(nodes, runtime.registry)
    gid = graph_id or f"graph-{new_id()[:12]}"
    existing = await offload(runtime.runtime_store.rt_graph, gid)
    if existing:
        check_same_graph(gid, existing, ordered)
        return Graph(runtime, gid)
    records = [
        RunPatch(engine=runtime.engine.name, submitted_by=claimed_user()).apply(record)
        for record in graph_records(runtime.registry, runtime.limits, runtime.now, gid, ordered)
    ]
    try:
        stored = await offload(
            runtime.runtime_store.rt_insert_many,
            records,
            max_pending=runtime.limits.max_pending_runs,
        )
    except DurableConflictError:
        existing = await offload(runtime.runtime_store.rt_graph, gid)
        if existing:  # another process submitted the same graph first
            check_same_graph(gid, existing, ordered)
            return Graph(runtime, gid)
        raise
    # Dependents first: the nodes are claimable from the commit on, and a node's
    # queued must be in its log before a dependency's end promotes it to pending.
    for record in reversed(stored):
        await offload(unclaimed_event, runtime, record)
    runtime.engine.wake()
    return Graph(runtime, gid)


async def submit_task(
    runtime: RunServices,
    name: str,
    input: Any,
    *,
    request_id: str | None,
    run_id: str | None,
    timeout: float | None,
) -> TaskRun:
    """Insert a task run and its first state event (``DurableRuntime.submit_task``)."""
    task = runtime.tasks.get(name)
    if task is None:
        raise ConfigurationError(
            f"no task {name!r}: tasks are defined with define_task() and passed to open()"
        )
    record = task_record(
        task,
        runtime.registry,
        runtime.limits,
        runtime.now,
        input,
        request_id=request_id,
        run_id=run_id,
        timeout=timeout,
    )
    record = RunPatch(engine=runtime.engine.name).apply(record)
    stored = await insert(
        runtime, record, enqueue=False, max_pending=runtime.limits.max_pending_tasks
    )
    return TaskRun(runtime, stored.run_id)


async def insert(
    runtime: RunServices, record: RuntimeRun, *, enqueue: bool, max_pending: int
) -> RuntimeRun:
    """Insert a validated run record; a new one gets its first state event and wakes the engine.

    Returns:
        The stored record (the earlier run when ``request_id`` repeats a submission).
    """
    stored, created = await offload(
        runtime.runtime_store.rt_insert, record, enqueue=enqueue, max_pending=max_pending
    )
    if created:
        written = await offload(StateEventWrites(runtime).unclaimed, stored)
        if written and stored.state == "pending":  # its first claim need not read the log
            runtime.pending_written.add(stored.run_id)
        runtime.engine.wake()
    return stored
