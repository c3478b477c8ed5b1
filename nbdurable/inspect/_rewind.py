"""Forking a run from one of its checkpoints: time travel that never rewrites history."""

from __future__ import annotations

from typing import Unpack

from ..durable._checkpoint import AgentCheckpoint
from ..events._fork import ForkOptions, fork_run
from ..events._model import RUN_FORKED
from ._source import StoreLike, opened

__all__ = ["RUN_FORKED", "rewind"]


def rewind(
    store: StoreLike, run_id: str, step_index: int, **options: Unpack[ForkOptions]
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
        TypeError: An unknown option.
    """
    with opened(store) as source:
        return fork_run(source, run_id, step_index, **options)
