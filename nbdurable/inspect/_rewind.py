"""Forking a run from one of its checkpoints: time travel that never rewrites history."""

from __future__ import annotations

import time
from typing import Any

from .._deps import new_id
from .._errors import ConfigurationError, DurableConflictError
from ..durable.checkpoint import AgentCheckpoint, CheckpointStatus, ForkPoint
from ..durable.signer import ApprovalSigner, store_signer
from ..durable.store import HistoryStore, supports
from ..events.log import EVENTS, notify
from ..events.model import CHECKPOINT_SAVED, RUN_STATE, NewEvent
from ..messages import Message, ToolApprovalRequest
from ..runtime.records import RunState, RuntimeRun
from ._source import StoreLike, checkpoint_at, opened, runtime_record

__all__ = ["RUN_FORKED", "rewind"]

RUN_FORKED = "run_forked"
"""First event of a fork's log (payload: the parent's ``run_id`` and ``step_index``, ``edited``)."""


def rewind(
    store: StoreLike,
    run_id: str,
    step_index: int,
    *,
    new_run_id: str | None = None,
    edit: Message | str | None = None,
    signer: ApprovalSigner | None = None,
) -> AgentCheckpoint:
    """Fork a new run from the checkpoint of ``run_id`` at ``step_index``.

    The fork's first checkpoint holds the history as of that step (optionally
    with its last message replaced by ``edit``), the cumulative usage as of that
    step and ``forked_from`` naming the parent; it continues at the next step
    index. The original run is never modified. Stores that keep a message chain
    (SQLite, PostgreSQL, memory) share the common prefix: only an edited
    message is new; the JSONL store copies the history into the fork's file.

    Without an edit the fork keeps the checkpoint's status and pending
    approvals, their tokens signed again for the fork's run id (with ``signer``,
    or the store's secret as :class:`~nbdurable.DurableRuntime` finds it). With an
    edit, nothing is pending and the status follows the new last message: a user,
    system or tool message leaves the fork ``running`` (its next step asks the
    model), an assistant text makes it ``completed``.

    When the runtime ran the parent, the fork gets a runtime record of its own
    (same agent and version, a new session): ``pending`` when there is a next
    step, so any runtime serving the agent runs it at once (``nbdurable worker``,
    a notebook's runtime); ``waiting_approval``, ``completed`` or
    ``needs_attention`` otherwise.

    Args:
        store: A store, or a store URL.
        run_id: The run to fork (itself possibly a fork).
        step_index: The step whose checkpoint the fork starts from (0 to the last).
        new_run_id: The fork's run id (default: generated).
        edit: A message that replaces the checkpoint's last message; a string
            is a user message.
        signer: Signs the fork's pending approvals (default: the store's secret).

    Returns:
        The fork's first checkpoint (its ``run_id`` is the new run's).

    Raises:
        RunNotFoundError: The store has no such run.
        CheckpointNotFoundError: The run has no checkpoint at ``step_index``.
        DurableConflictError: ``new_run_id`` is taken.
        ConfigurationError: An edit of an empty history, an edit that is not a
            message, or an assistant edit carrying tool calls.
    """
    with opened(store) as source:
        base = checkpoint_at(source, run_id, step_index)
        fork_id = new_run_id or f"run-{new_id()[:16]}"
        if source.history(fork_id) or runtime_record(source, fork_id) is not None:
            raise DurableConflictError(f"run id {fork_id!r} exists already")
        now = int(time.time() * 1000)
        checkpoint = _fork_checkpoint(base, fork_id, _edit_message(edit), now, source, signer)
        _save(source, checkpoint)
        parent = runtime_record(source, run_id)
        if parent is not None:
            _insert_record(source, parent, checkpoint, now)
    return checkpoint


def _edit_message(edit: Message | str | None) -> Message | None:
    if edit is None or isinstance(edit, Message):
        if edit is not None and edit.role == "assistant" and edit.tool_calls:
            raise ConfigurationError(
                "an edit cannot be an assistant message with tool calls (their results "
                "would be missing); edit the tool result message instead"
            )
        return edit
    if isinstance(edit, str):
        return Message(role="user", content=edit)
    raise ConfigurationError(f"edit must be a Message or a string, not {type(edit).__name__}")


def _fork_checkpoint(
    base: AgentCheckpoint,
    fork_id: str,
    edit: Message | None,
    now: int,
    store: HistoryStore,
    signer: ApprovalSigner | None,
) -> AgentCheckpoint:
    messages = base.messages
    status: CheckpointStatus = base.status
    pending: tuple[ToolApprovalRequest, ...] = base.pending_approvals
    finish_reason = base.finish_reason
    if edit is not None:
        if not messages:
            raise ConfigurationError(f"step {base.step_index} of {base.run_id!r} has no message")
        messages = (*messages[:-1], edit)
        pending = ()
        status = "completed" if edit.role == "assistant" else "running"
        finish_reason = "stop" if status == "completed" else None
    elif any(r.token is not None for r in pending):
        use = signer or store_signer(store)
        pending = tuple(
            r.model_copy(update={"token": use.sign(r, run_id=fork_id)}) for r in pending
        )
    return AgentCheckpoint(
        run_id=fork_id,
        step_index=base.step_index,
        status=status,
        messages=messages,
        usage=base.usage,
        pending_approvals=pending,
        agent_path=base.agent_path,
        created_at=now,
        finish_reason=finish_reason,
        forked_from=ForkPoint(run_id=base.run_id, step_index=base.step_index, edited=bool(edit)),
    )


def _save(store: HistoryStore, checkpoint: AgentCheckpoint) -> None:
    if not supports(store, EVENTS):
        store.save(checkpoint)
        return
    fork = checkpoint.forked_from
    assert fork is not None
    events = [
        NewEvent(
            type=RUN_FORKED,
            step_index=checkpoint.step_index,
            created_at=checkpoint.created_at,
            payload={"run_id": fork.run_id, "step_index": fork.step_index, "edited": fork.edited},
        ),
        NewEvent(
            type=CHECKPOINT_SAVED,
            step_index=checkpoint.step_index,
            created_at=checkpoint.created_at,
            payload={"step_id": checkpoint.step_id, "status": checkpoint.status},
        ),
    ]
    saver: Any = store
    saver.save_with_events(checkpoint, events)
    notify(store, checkpoint.run_id)


def _insert_record(
    store: HistoryStore, parent: RuntimeRun, checkpoint: AgentCheckpoint, now: int
) -> None:
    state: RunState
    changes: dict[str, Any] = {}
    if checkpoint.status == "running":
        state = "pending"
    elif checkpoint.status == "completed":
        state = "completed"
        changes["result_text"] = checkpoint.messages[-1].text if checkpoint.messages else ""
    elif checkpoint.pending_approvals:
        state = "waiting_approval"
    else:
        state = "needs_attention"
        changes["reason"] = "the run waits for a client tool's result"
    record = RuntimeRun(
        run_id=checkpoint.run_id,
        agent_id=parent.agent_id,
        agent_version=parent.agent_version,
        session_id=f"session-{checkpoint.run_id}",
        prompt=parent.prompt,
        state="pending",
        created_at=now,
        updated_at=now,
        retry_policy=parent.retry_policy,
        stream=parent.stream,
        max_steps=parent.max_steps,
        fingerprint=parent.fingerprint,
    )
    runtime: Any = store
    stored, _ = runtime.rt_insert(record, enqueue=True, max_pending=2**62)
    if state != "pending" or changes:
        stored = runtime.rt_update(stored.run_id, {"state": state, **changes})
    event = NewEvent(
        type=RUN_STATE,
        created_at=now,
        payload={"state": stored.state, "reason": stored.reason, "next_attempt_at": None},
    )
    runtime.append_events(stored.run_id, [event])
    notify(store, stored.run_id)
