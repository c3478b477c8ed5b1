"""An optional store capability: several writes of a run's owner in one transaction.

A runtime step writes its model journal entry, its counters, its tool intents
and its events. Written one by one each is a transaction of its own; a store
with :meth:`RuntimeCommit.rt_commit` takes them together, so they commit at
once (one fsync on SQLite, one round trip on a remote store) and are fenced
once. The runtime uses it where the store has it and falls back to the
separate calls (``rt_journal``, ``rt_update``, ``rt_intent``,
``append_events``) where it does not, so a store written before it keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .._errors import ConfigurationError
from ..runs import RunPatch, RuntimeRun, ToolIntent
from .model import Event, NewEvent

__all__ = ["COMMIT_CHANGES", "RuntimeCommit", "check_commit", "commits_together"]

COMMIT_CHANGES = frozenset({"operations", "model_attempts", "updated_at"})
"""The record fields a combined write may change: counters, never the run's state."""


@runtime_checkable
class RuntimeCommit(Protocol):
    """A store that writes several of a run owner's changes in one fenced transaction."""

    def rt_commit(
        self,
        run_id: str,
        *,
        fence: int,
        events: Sequence[NewEvent] = (),
        journal: tuple[int, str] | None = None,
        changes: RunPatch | None = None,
        intents: Sequence[ToolIntent] = (),
    ) -> tuple[Sequence[Event], RuntimeRun | None]:
        """Write everything given, all or nothing, if ``fence`` is still the run's.

        Args:
            run_id: The run written to.
            fence: The owner's fencing token.
            events: Appended to the run's log, offsets continuing from its last one.
            journal: ``(step_index, response JSON)``: as ``rt_journal``.
            changes: Applied to the run record, as ``rt_update`` (only
                :data:`COMMIT_CHANGES`: a change of state has its own write).
            intents: Written or completed, as ``rt_intent``.

        Returns:
            The events as stored, and the updated record (None without ``changes``).

        Raises:
            FencedOutError: ``fence`` is not the run's current fence; nothing is written.
            RunNotFoundError: ``changes`` for a run that has no record.
            ConfigurationError: ``changes`` names a field outside :data:`COMMIT_CHANGES`.
        """
        ...


def check_commit(changes: RunPatch | None) -> None:
    """Refuse record changes a combined write may not make.

    Raises:
        ConfigurationError: A field outside :data:`COMMIT_CHANGES`.
    """
    extra = sorted((changes.fields_set if changes else frozenset()) - COMMIT_CHANGES)
    if extra:
        raise ConfigurationError(f"rt_commit cannot change {', '.join(extra)}")


def commits_together(store: object) -> RuntimeCommit | None:
    """``store`` when it has :meth:`RuntimeCommit.rt_commit`, else None."""
    return store if callable(getattr(store, "rt_commit", None)) else None  # type: ignore[return-value]
