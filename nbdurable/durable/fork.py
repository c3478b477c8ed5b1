"""The fork core: a new run's first checkpoint, and runtime record, built from a stored one.

Forking never rewrites history: the parent's checkpoints stay as they are and
the fork is a run of its own that names its origin (``forked_from``).
:func:`nbdurable.inspect.rewind` and ``DurableRuntime.fork`` both build their
fork here and write it with :func:`nbdurable.events.fork.fork_run`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from .._deps import new_id
from .._errors import ConfigurationError, DurableConflictError
from ..messages import Message, ToolApprovalRequest
from ..runs import RunPatch, RunState, RuntimeRun
from .checkpoint import AgentCheckpoint, CheckpointStatus, ForkPoint
from .lookup import checkpoint_at, runtime_record
from .signer import ApprovalSigner, store_signer
from .store import HistoryStore

__all__ = ["Fork", "edit_message", "fork_checkpoint", "fork_record", "plan_fork"]


@dataclass(frozen=True)
class Fork:
    """A fork as it is to be written.

    Attributes:
        checkpoint: The fork's first checkpoint (its ``run_id`` is the new run's).
        record: The fork's runtime record as it is inserted (``pending``), when
            the runtime ran the parent; None otherwise.
        state: The state the record takes once inserted.
        changes: The other fields that change with ``state``.
    """

    checkpoint: AgentCheckpoint
    record: RuntimeRun | None = None
    state: RunState = "pending"
    changes: RunPatch = RunPatch()


def plan_fork(
    store: HistoryStore,
    run_id: str,
    step_index: int,
    *,
    new_run_id: str | None = None,
    edit: Message | str | None = None,
    signer: ApprovalSigner | None = None,
    now: int | None = None,
) -> Fork:
    """Build the fork of ``run_id`` at ``step_index`` from what ``store`` holds; write nothing.

    See :func:`nbdurable.inspect.rewind` for what a fork holds.

    Raises:
        RunNotFoundError: The store has no such run.
        CheckpointNotFoundError: The run has no checkpoint at ``step_index``.
        DurableConflictError: ``new_run_id`` is taken.
        ConfigurationError: An edit of an empty history, an edit that is not a
            message, or an assistant edit carrying tool calls.
    """
    base = checkpoint_at(store, run_id, step_index)
    fork_id = new_run_id or f"run-{new_id()[:16]}"
    if store.history(fork_id) or runtime_record(store, fork_id) is not None:
        raise DurableConflictError(f"run id {fork_id!r} exists already")
    at = int(time.time() * 1000) if now is None else now
    checkpoint = fork_checkpoint(base, fork_id, edit_message(edit), at, store, signer)
    parent = runtime_record(store, run_id)
    if parent is None:
        return Fork(checkpoint)
    return fork_record(parent, checkpoint, at)


def edit_message(edit: Message | str | None) -> Message | None:
    """``edit`` as the message that replaces the checkpoint's last one (a string: a user message).

    Raises:
        ConfigurationError: Not a message or a string, or an assistant message
            with tool calls (their results would be missing).
    """
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


def fork_checkpoint(
    base: AgentCheckpoint,
    fork_id: str,
    edit: Message | None,
    now: int,
    store: HistoryStore,
    signer: ApprovalSigner | None,
) -> AgentCheckpoint:
    """The fork's first checkpoint: ``base`` under ``fork_id``, with ``edit`` as its last message.

    Without an edit the status and pending approvals are kept, their tokens
    signed again for ``fork_id`` (with ``signer``, or the store's secret). With
    one, nothing is pending and the status follows the new last message.

    Raises:
        ConfigurationError: An edit of a checkpoint without messages.
    """
    messages: Sequence[Message] = base.messages
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


def fork_record(parent: RuntimeRun, checkpoint: AgentCheckpoint, now: int) -> Fork:
    """The fork with its runtime record: the parent's agent and version, a session of its own.

    ``pending`` when there is a next step (any runtime serving the agent runs
    it), else ``completed``, ``waiting_approval`` or ``needs_attention``.
    """
    state: RunState
    changes = RunPatch()
    if checkpoint.status == "running":
        state = "pending"
    elif checkpoint.status == "completed":
        state = "completed"
        changes = RunPatch(result_text=checkpoint.messages[-1].text if checkpoint.messages else "")
    elif checkpoint.pending_approvals:
        state = "waiting_approval"
    else:
        state = "needs_attention"
        changes = RunPatch(reason="the run waits for a client tool's result")
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
        engine=parent.engine,
    )
    return Fork(checkpoint, record, state, changes)
