"""A store composed from parts: what the SQL stores' classes share.

Each SQL backend is a thin class over parts that own their state and share one
connection part: a checkpoint part (:class:`CheckpointPart`) and a run-record
part (a :class:`~nbdurable.durable.store.RunStore` of its own). The class passes
the seam's calls to them here and adds what is its own (the event log, the
calls that never wait, listening, closing).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Protocol, Self

from ..durable._checkpoint import AgentCheckpoint, CheckpointInfo
from ..durable._records import RunRecord
from ..durable.store import DelegatingRunStore, EventLog, HistoryStore
from ..durable.store._delegating import passed_on
from ..events._model import Event, NewEvent
from ..messages import Message

__all__ = ["CheckpointPart", "ComposedStore"]


class CheckpointPart(Protocol):
    """A backend's checkpoints: what :class:`ComposedStore` passes its calls to."""

    def save(
        self,
        checkpoint: AgentCheckpoint,
        events: Sequence[NewEvent],
        fence: int | None = None,
        *,
        extends: Sequence[Message] | None = None,
    ) -> Sequence[Event]:
        """Save a checkpoint and append ``events`` in one transaction, fenced when asked."""
        ...

    def load(self, run_id: str, step_index: int | None = None) -> AgentCheckpoint | None: ...

    def history(self, run_id: str) -> builtins.list[CheckpointInfo]: ...

    def list(self) -> builtins.list[str]: ...

    def list_runs(self) -> builtins.list[RunRecord]: ...

    def delete(self, run_id: str) -> None: ...


class ComposedStore(HistoryStore, DelegatingRunStore, EventLog):
    """Checkpoints passed to :attr:`checkpoints`, run records to :attr:`run_records`.

    ``history`` reads no message; ``delete`` deletes a run's checkpoints, records
    and events, and the message nodes no other run uses.
    """

    checkpoints: CheckpointPart
    """The checkpoint part (set by the subclass's ``__init__``)."""

    @property
    def saves_extensions(self) -> bool:
        """``save`` and ``save_with_events`` take ``extends`` (see :meth:`save`)."""
        return True

    def save(
        self, checkpoint: AgentCheckpoint, *, extends: Sequence[Message] | None = None
    ) -> None:
        """Store a checkpoint in one transaction: its new message nodes and one row.

        Args:
            checkpoint: What to save.
            extends: Optional promise that ``checkpoint.messages`` begins with the
                very message objects of this history (the one saved last): the
                store then writes the tail without comparing the whole history.
        """
        self.checkpoints.save(checkpoint, (), extends=extends)

    def save_with_events(
        self,
        checkpoint: AgentCheckpoint,
        events: Sequence[NewEvent],
        *,
        fence: int | None = None,
        extends: Sequence[Message] | None = None,
    ) -> Sequence[Event]:
        """Store a checkpoint and append events to its run's log in one transaction.

        With ``fence`` (a runtime owner's token) the write is refused with
        :class:`~nbdurable.FencedOutError` when the run has another owner now,
        checked in the same transaction; ``extends`` is as in :meth:`save`.
        """
        return self.checkpoints.save(checkpoint, events, fence, extends=extends)

    load = passed_on(HistoryStore.load, "checkpoints")
    history = passed_on(HistoryStore.history, "checkpoints")
    list = passed_on(HistoryStore.list, "checkpoints")
    list_runs = passed_on(HistoryStore.list_runs, "checkpoints")
    delete = passed_on(HistoryStore.delete, "checkpoints")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
