"""The fork core: a new run's first checkpoint and runtime record, built from a stored one.

Forking never rewrites history: the parent's checkpoints stay as they are and
the fork is a run of its own that names its origin (``forked_from``).
:func:`nbdurable.inspect.rewind` and ``DurableRuntime.fork`` both call
:func:`fork_run`.
"""

from __future__ import annotations

import time
from typing import Any, TypedDict, Unpack

from .._deps import new_id
from .._errors import ConfigurationError, DurableConflictError
from ..durable._checkpoint import AgentCheckpoint, ForkPoint
from ..durable._lookup import checkpoint_at, runtime_record
from ..durable._signer import ApprovalSigner, store_signer
from ..durable.store import EventLog, HistoryStore, notify
from ..messages import Message
from ..runs import RunPatch, RunState, RuntimeRun
from ._model import CHECKPOINT_SAVED, RUN_FORKED, RUN_STATE, NewEvent

__all__ = ["ForkOptions", "fork_run"]


class ForkOptions(TypedDict, total=False):
    """How a fork is made: the keyword arguments of :func:`nbdurable.inspect.rewind`."""

    new_run_id: str | None
    edit: Message | str | None
    signer: ApprovalSigner | None


def fork_run(
    store: HistoryStore, run_id: str, step_index: int, **options: Unpack[ForkOptions]
) -> AgentCheckpoint:
    """Fork a new run from the checkpoint of ``run_id`` at ``step_index`` and write it.

    See :func:`nbdurable.inspect.rewind`, which documents the fork, its options
    and its errors.

    Returns:
        The fork's first checkpoint (its ``run_id`` is the new run's).

    Raises:
        TypeError: An option :class:`ForkOptions` does not name (as for an
            unknown keyword); and those :func:`~nbdurable.inspect.rewind` lists.
    """
    if unknown := sorted(options.keys() - ForkOptions.__annotations__.keys()):
        raise TypeError(f"a fork got unexpected options: {', '.join(unknown)}")
    base = checkpoint_at(store, run_id, step_index)
    fork_id = options.get("new_run_id") or f"run-{new_id()[:16]}"
    if store.history(fork_id) or runtime_record(store, fork_id) is not None:
        raise DurableConflictError(f"run id {fork_id!r} exists already")
    edit = _edit_message(options.get("edit"))
    checkpoint = _checkpoint(base, fork_id, edit, store, options.get("signer"))
    parent = runtime_record(store, run_id)
    _save(store, checkpoint)
    if parent is not None:
        _insert_record(store, parent, checkpoint)
    return checkpoint


def _edit_message(edit: Message | str | None) -> Message | None:
    """``edit`` as the message that replaces the checkpoint's last one (a string: a user's)."""
    if isinstance(edit, str):
        return Message(role="user", content=edit)
    if edit is not None and not isinstance(edit, Message):
        raise ConfigurationError(f"edit must be a Message or a string, not {type(edit).__name__}")
    if edit is not None and edit.role == "assistant" and edit.tool_calls:
        raise ConfigurationError(
            "an edit cannot be an assistant message with tool calls (their results "
            "would be missing); edit the tool result message instead"
        )
    return edit


def _checkpoint(
    base: AgentCheckpoint,
    fork_id: str,
    edit: Message | None,
    store: HistoryStore,
    signer: ApprovalSigner | None,
) -> AgentCheckpoint:
    """``base`` under ``fork_id``.

    With an edit nothing is pending and the status follows the new last message;
    without one the pending approvals' tokens are signed again for ``fork_id``.
    """
    update: dict[str, Any] = {}
    if edit is not None:
        if not base.messages:
            raise ConfigurationError(f"step {base.step_index} of {base.run_id!r} has no message")
        status = "completed" if edit.role == "assistant" else "running"
        update = {
            "messages": (*base.messages[:-1], edit),
            "pending_approvals": (),
            "status": status,
            "finish_reason": "stop" if status == "completed" else None,
        }
    elif any(r.token is not None for r in base.pending_approvals):
        use = signer or store_signer(store)
        update["pending_approvals"] = tuple(
            r.model_copy(update={"token": use.sign(r, run_id=fork_id)})
            for r in base.pending_approvals
        )
    fields = {name: getattr(base, name) for name in _KEPT}
    return AgentCheckpoint(
        **{**fields, **update},
        run_id=fork_id,
        created_at=int(time.time() * 1000),
        forked_from=ForkPoint(run_id=base.run_id, step_index=base.step_index, edited=bool(edit)),
    )


_KEPT = (
    "step_index",
    "status",
    "messages",
    "usage",
    "pending_approvals",
    "agent_path",
    "finish_reason",
)
"""The checkpoint fields a fork starts from (every other field is the fork's own)."""


def _save(store: HistoryStore, checkpoint: AgentCheckpoint) -> None:
    """Save the fork's checkpoint, with ``run_forked`` first in its log."""
    if not isinstance(store, EventLog):
        store.save(checkpoint)
        return
    origin = checkpoint.forked_from
    assert origin is not None
    events = [
        NewEvent(
            type=RUN_FORKED,
            step_index=checkpoint.step_index,
            created_at=checkpoint.created_at,
            payload={
                "run_id": origin.run_id,
                "step_index": origin.step_index,
                "edited": origin.edited,
            },
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


def _insert_record(store: HistoryStore, parent: RuntimeRun, checkpoint: AgentCheckpoint) -> None:
    """Insert the fork's runtime record: the parent's agent and version, a session of its own.

    ``pending`` when there is a next step (any runtime serving the agent runs
    it), else ``completed``, ``waiting_approval`` or ``needs_attention``.
    """
    state: RunState = "pending"
    changes = RunPatch()
    if checkpoint.status == "completed":
        state = "completed"
        changes = RunPatch(result_text=checkpoint.messages[-1].text if checkpoint.messages else "")
    elif checkpoint.status != "running" and checkpoint.pending_approvals:
        state = "waiting_approval"
    elif checkpoint.status != "running":
        state = "needs_attention"
        changes = RunPatch(reason="the run waits for a client tool's result")
    now = checkpoint.created_at
    record = RuntimeRun(
        run_id=checkpoint.run_id,
        session_id=f"session-{checkpoint.run_id}",
        state="pending",
        created_at=now,
        updated_at=now,
        **{name: getattr(parent, name) for name in _INHERITED},
    )
    runtime: Any = store
    if state == "pending" and not changes:
        stored, _ = runtime.rt_insert(record, enqueue=True, max_pending=2**62)
    else:  # inserted as it is: a pending record in between would be claimed by a worker
        changed = (RunPatch(state=state) | changes).apply(record)
        [stored] = runtime.rt_insert_many([changed], max_pending=2**62)
    event = NewEvent(
        type=RUN_STATE,
        created_at=now,
        payload={"state": stored.state, "reason": stored.reason, "next_attempt_at": None},
    )
    runtime.append_events(stored.run_id, [event])
    notify(store, stored.run_id)


_INHERITED = (
    "agent_id",
    "agent_version",
    "prompt",
    "retry_policy",
    "stream",
    "max_steps",
    "fingerprint",
    "engine",
)
"""The runtime record fields a fork takes from its parent."""
