"""Writing a fork: its first checkpoint with the events that open its log, and its run record.

:func:`nbdurable.inspect.rewind` and ``DurableRuntime.fork`` both call
:func:`fork_run`; what the fork holds is built by the fork core,
:mod:`nbdurable.durable.fork`.
"""

from __future__ import annotations

from typing import Any

from ..durable.checkpoint import AgentCheckpoint
from ..durable.fork import Fork, plan_fork
from ..durable.signer import ApprovalSigner
from ..durable.store import EventLog, HistoryStore, notify
from ..messages import Message
from .model import CHECKPOINT_SAVED, RUN_FORKED, RUN_STATE, NewEvent

__all__ = ["fork_run", "write_fork"]


def fork_run(
    store: HistoryStore,
    run_id: str,
    step_index: int,
    *,
    new_run_id: str | None = None,
    edit: Message | str | None = None,
    signer: ApprovalSigner | None = None,
) -> AgentCheckpoint:
    """Fork a new run from the checkpoint of ``run_id`` at ``step_index`` and write it.

    See :func:`nbdurable.inspect.rewind`, which documents the fork.

    Returns:
        The fork's first checkpoint (its ``run_id`` is the new run's).
    """
    fork = plan_fork(store, run_id, step_index, new_run_id=new_run_id, edit=edit, signer=signer)
    write_fork(store, fork)
    return fork.checkpoint


def write_fork(store: HistoryStore, fork: Fork) -> None:
    """Save the fork's checkpoint (with ``run_forked`` first in its log) and insert its record."""
    _save(store, fork.checkpoint)
    if fork.record is not None:
        _insert_record(store, fork)


def _save(store: HistoryStore, checkpoint: AgentCheckpoint) -> None:
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


def _insert_record(store: HistoryStore, fork: Fork) -> None:
    assert fork.record is not None
    runtime: Any = store
    if fork.state == "pending" and not fork.changes:
        stored, _ = runtime.rt_insert(fork.record, enqueue=True, max_pending=2**62)
    else:  # inserted as it is: a pending record in between would be claimed by a worker
        changed = fork.record.model_copy(update={"state": fork.state, **fork.changes})
        [stored] = runtime.rt_insert_many([changed], max_pending=2**62)
    event = NewEvent(
        type=RUN_STATE,
        created_at=fork.checkpoint.created_at,
        payload={"state": stored.state, "reason": stored.reason, "next_attempt_at": None},
    )
    runtime.append_events(stored.run_id, [event])
    notify(store, stored.run_id)
