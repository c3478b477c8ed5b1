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
import threading
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import TypeAdapter

from .._errors import FencedOutError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._offload import offload
from ..durable.store import EventLog, notify
from ..events._model import Event, NewEvent
from ..events._writer import EventWriter
from ..loop._options import LoopOptions, build_options
from ..loop._subagent import AgentTool
from ..parts import StreamPart
from ..runs import RunPatch, RuntimeRun, unclaimable_by_definition, unserved_reason
from . import _lifecycle as lifecycle
from ._agent import Agent
from ._legs import leg_options
from ._log_in_front import EventLogInFront
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

_Held = tuple[AgentCheckpoint, list[NewEvent], dict[str, Any]]
"""A checkpoint's save held back: the checkpoint, its events, the save's options."""


class _SavesWithWhatFollows(EventLogInFront):
    """An event log that writes a checkpoint together with the events that follow it.

    A leg's outbox holds a step's parts, its checkpoint, then the next step's
    first parts: written as they come, that is two transactions (the checkpoint
    with the events before it, then the events after it). This store holds a
    checkpoint's save back until the writer's next write: events appended then
    go into the checkpoint's transaction, after its ``checkpoint_saved``, so
    the log's order is the same and a step's mirror is one transaction. What
    is still held when the outbox is written (:meth:`release`) is written then:
    by the time the mirror returns, everything is durable, as before.
    """

    inner: EventLog

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self._held: _Held | None = None
        self._lock = threading.Lock()

    def save_with_events(
        self, checkpoint: AgentCheckpoint, events: Sequence[NewEvent], **options: Any
    ) -> Sequence[Event]:
        """Hold the save (one held before it is written first)."""
        self.release()
        with self._lock:
            self._held = (checkpoint, list(events), options)
        return []

    def append_events(
        self, run_id: str, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> Sequence[Event]:
        """Append ``events``: with the held checkpoint of ``run_id``, in its transaction."""
        with self._lock:
            held, self._held = self._held, None
        if held is None or held[0].run_id != run_id or held[2].get("fence") != fence:
            if held is not None:
                self._write(held)
            return self.inner.append_events(run_id, events, fence=fence)
        checkpoint, before, options = held
        return self._write((checkpoint, [*before, *events], options))

    def release(self) -> None:
        """Write the checkpoint held, if any."""
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            self._write(held)

    def _write(self, held: _Held) -> Sequence[Event]:
        checkpoint, events, options = held
        added = self.inner.save_with_events(checkpoint, events, **options)
        notify(self.inner, checkpoint.run_id)  # the writer woke them when the save was held
        return added


async def write_outbox(
    runtime: RunServices, entries: Sequence[dict[str, Any]], run_log: str | None = None
) -> dict[str, Any] | None:
    """Write outbox entries in order, each into its event log (checkpoints atomically).

    A checkpoint is written in one transaction with the events of its log that
    follow it in the outbox (up to its log's next checkpoint), see
    :class:`_SavesWithWhatFollows`. The terminal event of ``run_log`` (the
    run's own log, at the end of a leg) is held back: its ``run_finished``
    payload is returned for the run's final state change to write after the
    final ``run_state``.
    """
    writers: dict[str, EventWriter] = {}
    logs: dict[str, _SavesWithWhatFollows] = {}
    for entry in entries:
        log = entry["log"]
        writer = writers.get(log)
        if writer is None:
            logs[log] = _SavesWithWhatFollows(runtime.event_store)
            writer = writers[log] = EventWriter(
                logs[log],
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
    for log, writer in writers.items():
        await writer.close()
        try:
            await offload(logs[log].release)
        except FencedOutError:
            raise
        except Exception as exc:  # best-effort, as the writer's own checkpoint saves
            runtime.deps.logger.error(
                "nbdurable: writing a checkpoint of run %s failed: %r", log, exc
            )
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
