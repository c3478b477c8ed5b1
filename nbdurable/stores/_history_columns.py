"""A run's checkpoint metadata as columns: a history listing without an object per checkpoint.

``store.history(run_id)`` lists one :class:`~nbdurable.CheckpointInfo` per
checkpoint. ``nd.inspect.history`` turns them into a DataFrame, that is into
columns again: for a 500-step run, building 500 infos (each with its usage and
step stats) and taking them apart cost more than reading and verifying the rows
(issue 42). :func:`history_columns` reads the same metadata straight into
columns where the store can (the SQLite store: every row's checksum verified
first, as its ``history`` does), and from ``history`` everywhere else.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..durable._checkpoint import CheckpointInfo, ForkPoint
from ..durable.store import HistoryStore
from ..messages import ToolApprovalRequest
from ._composed import ComposedStore

__all__ = ["ColumnsPart", "HistoryColumns", "history_columns"]

_NO_STATS = (None, None, None)


@dataclass(eq=False, slots=True)
class HistoryColumns:
    """Every checkpoint of a run in save order, one list per field (all the same length).

    The values are a :class:`~nbdurable.CheckpointInfo`'s, spread over lists:
    ``usage`` as its four columns, ``stats`` as four (all None for a checkpoint
    without step stats; ``started_at`` is None exactly then).
    """

    run_id: str
    step_index: list[int] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    finish_reason: list[str | None] = field(default_factory=list)
    message_count: list[int] = field(default_factory=list)
    created_at: list[int] = field(default_factory=list)
    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    total_tokens: list[int] = field(default_factory=list)
    cost: list[float | None] = field(default_factory=list)
    started_at: list[int | None] = field(default_factory=list)
    model_ms: list[int | None] = field(default_factory=list)
    tool_ms: list[int | None] = field(default_factory=list)
    tool_calls: list[tuple[str, ...] | None] = field(default_factory=list)
    pending_approvals: list[tuple[ToolApprovalRequest, ...]] = field(default_factory=list)
    forked_from: list[ForkPoint | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.step_index)

    @staticmethod
    def values_of(info: CheckpointInfo) -> tuple[Any, ...]:
        """One checkpoint's values, in the order of the fields after ``run_id``."""
        usage, stats = info.usage, info.stats
        return (
            info.step_index,
            info.status,
            info.finish_reason,
            info.message_count,
            info.created_at,
            usage.input_tokens,
            usage.output_tokens,
            usage.total_tokens,
            usage.cost,
            *(_NO_STATS if stats is None else (stats.started_at, stats.model_ms, stats.tool_ms)),
            None if stats is None else stats.tool_calls,
            info.pending_approvals,
            info.forked_from,
        )

    @classmethod
    def from_values(cls, run_id: str, rows: Sequence[Sequence[Any]]) -> HistoryColumns:
        """The columns of ``rows``, each the values :meth:`values_of` gives (one transposition)."""
        if not rows:
            return cls(run_id)
        return cls(run_id, *map(list, zip(*rows, strict=True)))

    @classmethod
    def from_infos(cls, run_id: str, infos: Sequence[CheckpointInfo]) -> HistoryColumns:
        """The columns of ``infos`` (a run's history as ``store.history`` lists it)."""
        return cls.from_values(run_id, [cls.values_of(info) for info in infos])


def history_columns(store: HistoryStore, run_id: str) -> HistoryColumns:
    """``store.history(run_id)`` as columns (empty when the store has no checkpoint of the run).

    A store whose checkpoint part reads columns itself (the SQLite store) is
    asked for them, unless its class changed what ``history`` returns; any other
    store's ``history`` is taken apart.

    Raises:
        StoreCorruptionError: A checkpoint row is damaged (as ``history`` raises it).
        CheckpointVersionError: A checkpoint was written with a newer version.
    """
    read = _column_reader(store)
    if read is not None:
        return read(run_id)
    return HistoryColumns.from_infos(run_id, store.history(run_id))


class ColumnsPart(ABC):
    """A checkpoint part (of a :class:`~._composed.ComposedStore`) that reads history as columns."""

    @abstractmethod
    def history_columns(self, run_id: str) -> HistoryColumns:
        """What the part's ``history`` lists, as columns, read and checked the same way."""


def _column_reader(store: HistoryStore) -> Callable[[str], HistoryColumns] | None:
    if not isinstance(store, ComposedStore) or type(store).history is not ComposedStore.history:
        return None
    part = store.checkpoints
    return part.history_columns if isinstance(part, ColumnsPart) else None
