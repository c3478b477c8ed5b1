"""What an engine that runs legs outside the runtime's own loop writes and builds.

Temporal's activities and Restate's journaled steps do the same things around
the step machine: write a leg's outbox (parts and checkpoints, in order, into
each event log), mark a log started, build the loop options of the agent or
sub-agent a step belongs to, note why a task run they do not serve waits, and
write a task run's end. Said once here; each engine turns a ``LookupError`` into
its own way of failing a step for good.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import TypeAdapter

from .._errors import FencedOutError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._offload import offload
from ..events._writer import EventWriter
from ..loop._options import LoopOptions, build_options
from ..loop._subagent import AgentTool
from ..parts import StreamPart
from ..runs import RunPatch, RuntimeRun, unclaimable_by_definition, unserved_reason
from . import _lifecycle as lifecycle
from ._agent import Agent
from ._legs import leg_options
from ._seam import RunServices
from ._state_events import claim_event
from ._tasks import TaskDefinition, TaskExecution, canonical_json, resume_point

__all__ = [
    "claim_pending",
    "loop_options_at",
    "finish_task_run",
    "note_task_waiting",
    "write_outbox",
    "write_started",
]

_PARTS: TypeAdapter[Any] = TypeAdapter(StreamPart)


async def write_outbox(
    runtime: RunServices, entries: Sequence[dict[str, Any]], run_log: str | None = None
) -> dict[str, Any] | None:
    """Write outbox entries in order, each into its event log (checkpoints atomically).

    The terminal event of ``run_log`` (the run's own log, at the end of a leg) is
    held back: its ``run_finished`` payload is returned for the run's final state
    change to write after the final ``run_state``.
    """
    writers: dict[str, EventWriter] = {}
    for entry in entries:
        log = entry["log"]
        writer = writers.get(log)
        if writer is None:
            writer = writers[log] = EventWriter(
                runtime.event_store,
                log,
                deps=runtime.deps,
                flush_interval=0.0,
                defer_terminal=log == run_log,
            )
        # JSON from a Temporal activity's arguments; Restate's in-process outbox
        # holds the objects (nbdurable/restate/_handler.py: RestateDriver)
        if "checkpoint" in entry:
            checkpoint = entry["checkpoint"]
            if not isinstance(checkpoint, AgentCheckpoint):
                checkpoint = AgentCheckpoint.model_validate(checkpoint)
            await writer.save_checkpoint(checkpoint)
        else:
            part = entry["part"]
            writer.part(_PARTS.validate_python(part) if isinstance(part, dict) else part)
    for writer in writers.values():
        await writer.close()
    run_writer = writers.get(run_log) if run_log is not None else None
    return run_writer.finish if run_writer is not None else None


async def write_started(
    runtime: RunServices, log: str, checkpoint: AgentCheckpoint | None, *, retried: bool = False
) -> None:
    """The ``run_started`` of a leg (or a sub-agent's log) resuming from ``checkpoint``."""
    writer = EventWriter(runtime.event_store, log, deps=runtime.deps, flush_interval=0.0)
    writer.started(
        resumed=checkpoint is not None,
        next_step_index=0 if checkpoint is None else checkpoint.step_index + 1,
        retried=retried,
    )
    await writer.close()


def loop_options_at(
    runtime: RunServices, agent: Agent, path: Sequence[str], record: RuntimeRun
) -> LoopOptions:
    """The options of the loop at ``path`` (agent-tool names) under the run's agent.

    Raises:
        LookupError: The agent has no sub-agent at ``path``.
    """
    if not path:
        return leg_options(agent, record, deps=runtime.deps)
    tools = agent.tool_map
    loop: Any = None
    for name in path:
        loop = tools.get(name)
        if not isinstance(loop, AgentTool):
            raise LookupError(f"agent {agent.id!r} has no sub-agent at {'/'.join(path)!r}")
        tools = loop.tools
    return build_options(
        model=loop.model,
        tools=loop.tools,
        instructions=loop.instructions,
        max_steps=loop.max_steps,
        stop_when=None,
        prepare_step=None,
        max_tool_concurrency=None,
        approve_tool_call=None,
        approval_responses=None,
        approval_signer=None,
        approval_max_age_ms=None,
        deps=runtime.deps,
        agent_path=tuple(path),
    )


async def claim_pending(runtime: RunServices, record: RuntimeRun, owner: str) -> RuntimeRun | None:
    """Take a ``pending`` run for a leg: a fenced compare-and-set to ``running``.

    Returns the claimed record, or None when the run's deadline had passed (it is
    ``failed``, reason ``timeout``, instead).

    Raises:
        FencedOutError: Another leg took the run first.
    """
    if record.deadline_at is not None and runtime.now() >= record.deadline_at:
        timed_out = RunPatch(state="failed", reason="timeout", lease_owner=None)
        await offload(runtime.set_state, record.run_id, timed_out)
        lifecycle.left(record, "failed", "timeout")
        return None
    claimed = await offload(
        runtime.runtime_store.rt_update,
        record.run_id,
        RunPatch(
            state="running",
            fence=record.fence + 1,
            lease_owner=owner,
            updated_at=runtime.now(),
            retried=False,
            waiting_reason=None,
        ),
        fence=record.fence,
    )
    await offload(claim_event, runtime, claimed)
    lifecycle.claimed(claimed, resumed=bool(claimed.verdicts or claimed.decided))
    return claimed


def note_task_waiting(runtime: RunServices, record: RuntimeRun, engine: str) -> None:
    """Record why a pending task run this worker does not serve waits (once, fenced).

    A worker that took the run meanwhile keeps it: the fenced write is refused,
    and that refusal is the expected outcome, not an error.
    """
    waiting = unclaimable_by_definition(
        record, runtime.now(), runtime.task_keys(), kind="task", engine=engine
    )
    if waiting is not None:
        with contextlib.suppress(FencedOutError):
            runtime.runtime_store.rt_update(
                record.run_id, RunPatch(waiting_reason=waiting.waiting_reason), fence=record.fence
            )


async def finish_task_run(
    runtime: RunServices,
    record: RuntimeRun,
    patch: RunPatch,
    fence: int | None,
    *,
    task_of: Callable[[RuntimeRun], TaskDefinition | None],
    read: Callable[[str], RuntimeRun],
) -> str:
    """Write an unfinished task run's final state (``patch``); the state it ends in.

    ``completed`` gets the last checkpointed state as its result (a version this
    worker does not serve, ``task_of`` None, fails with the reason). A run being
    cancelled ends ``cancelled`` whatever the phases did, and its unfinished owned
    runs are cancelled. A run another execution took (fenced) keeps its state,
    read again with ``read``.
    """
    cancel = record.state == "cancelling" or patch.state == "cancelled"
    if cancel:
        patch = RunPatch(state="cancelled", reason="cancelled")
    elif patch.state == "completed":
        task = task_of(record)
        if task is None:
            patch = RunPatch(state="failed", reason="error", error=unserved_reason(record))
        else:
            _, state = await offload(resume_point, TaskExecution(runtime, task, record))
            patch |= RunPatch(result_text=canonical_json(state))
    try:
        patch |= RunPatch(lease_owner=None, lease_expires_at=None)
        record = await offload(runtime.set_state, record.run_id, patch, fence=fence)
    except FencedOutError:
        return (await offload(read, record.run_id)).state
    lifecycle.left(record, record.state, record.reason)
    if cancel:
        await runtime.cancel_owned(record.run_id)
    return record.state
