"""Deleting finished runs: which runs may go, and the report of what went.

A run may go when it finished before the cut-off: its run record is ``completed``,
``failed`` or ``cancelled`` (or, for a run of the loop API with no record, its
latest checkpoint is ``completed``). An unfinished run never goes, nor does a run
tied to one: the other nodes of its graph, the task that owns it or the runs an
unfinished task owns. A sub-agent's checkpoints (``{run}::{agent}#{call}``) go
with their top-level run.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...runs import TERMINAL_STATES, RuntimeRun

if TYPE_CHECKING:
    from ._checkpoints import HistoryStore

__all__ = ["PruneReport", "PrunedRun", "prune_runs"]


@dataclass(frozen=True)
class PrunedRun:
    """A finished run that a prune deletes (or would delete, in a dry run).

    Attributes:
        run_id: The top-level run.
        status: Its run record's state, or its latest checkpoint's status.
        finished_at: When it finished (its record's or latest checkpoint's time), epoch ms.
        stored_runs: The stored run ids deleted with it (it, and its sub-agents' checkpoints).
    """

    run_id: str
    status: str
    finished_at: int
    stored_runs: tuple[str, ...]


@dataclass(frozen=True)
class PruneReport:
    """What a prune deleted (or would delete).

    Attributes:
        runs: The runs, oldest first.
        dry_run: True when nothing was deleted.
        reclaimed: How the store gave the space back (None: nothing to do).
    """

    runs: tuple[PrunedRun, ...]
    dry_run: bool
    reclaimed: str | None = None


def top_run_id(run_id: str) -> str:
    """The top-level run a stored run id belongs to (a sub-agent's: its parent's)."""
    return run_id.split("::", 1)[0]


def _records(store: HistoryStore) -> builtins.list[RuntimeRun]:
    from ._runs import RunStore  # a run store is a history store too: the import goes one way

    return builtins.list(store.rt_list()) if isinstance(store, RunStore) else []


def _protected(records: Iterable[RuntimeRun]) -> set[str]:
    """Run ids that must stay: the unfinished runs and every run tied to one."""
    records = builtins.list(records)
    unfinished = {r.run_id for r in records if r.state not in TERMINAL_STATES}
    graphs = {r.graph_id for r in records if r.run_id in unfinished and r.graph_id}
    owners = {r.owner_run_id for r in records if r.run_id in unfinished and r.owner_run_id}
    kept = set(unfinished) | owners
    for record in records:
        if record.graph_id in graphs or record.owner_run_id in unfinished | owners:
            kept.add(record.run_id)
    return kept


def prunable_runs(store: HistoryStore, finished_before: int) -> builtins.list[PrunedRun]:
    """The runs of ``store`` that finished before ``finished_before`` (epoch ms) and may go."""
    records = _records(store)
    by_id = {r.run_id: r for r in records}
    kept = _protected(records)
    stored: dict[str, builtins.list[str]] = {}
    latest: dict[str, tuple[str, int]] = {}
    for run in store.list_runs():
        top = top_run_id(run.run_id)
        stored.setdefault(top, []).append(run.run_id)
        if run.run_id == top:
            latest[top] = (run.status, run.updated_at)
    found: builtins.list[PrunedRun] = []
    for top in {*by_id, *latest}:
        if top in kept:
            continue
        record = by_id.get(top)
        if record is not None:
            if record.state not in TERMINAL_STATES:
                continue
            status, finished_at = str(record.state), record.updated_at
        else:
            status, finished_at = latest[top]
            if status != "completed":
                continue  # a loop run suspended or running may still go on
        if finished_at >= finished_before:
            continue
        ids = stored.get(top, [])
        found.append(PrunedRun(top, status, finished_at, tuple(ids) if ids else (top,)))
    return sorted(found, key=lambda run: (run.finished_at, run.run_id))


def prune_runs(
    store: HistoryStore,
    finished_before: int,
    *,
    dry_run: bool = False,
    reclaim: Callable[[], str | None] | None = None,
    delete_many: Callable[[builtins.list[str]], None] | None = None,
) -> PruneReport:
    """Delete the runs finished before a cut-off, then give the space back.

    Each run goes with its checkpoints, its events and its run record.

    Args:
        store: A store with ``list_runs`` and ``delete`` (and ``rt_list`` when it
            keeps run records).
        finished_before: Cut-off, epoch milliseconds.
        dry_run: Only report what would go.
        reclaim: Called once after deleting something; returns how space was reclaimed.
        delete_many: Deletes stored run ids in bulk (a server store's set-based
            delete: a few statements for thousands of runs); default: ``store.delete``
            one by one. Given the ids in the order one-by-one deletes would use.
    """
    runs = prunable_runs(store, finished_before)
    if dry_run:
        return PruneReport(tuple(runs), dry_run=True)
    ordered: builtins.list[str] = []
    for run in runs:
        # a sub-agent's checkpoints first, so a crash midway never leaves orphans
        # whose top-level run is gone
        ordered.extend(sorted(run.stored_runs, key=lambda stored: stored == run.run_id))
        if run.run_id not in run.stored_runs:
            ordered.append(run.run_id)
    if delete_many is not None:
        delete_many(ordered)
    else:
        for run_id in ordered:
            store.delete(run_id)
    reclaimed = reclaim() if runs and reclaim is not None else None
    return PruneReport(tuple(runs), dry_run=False, reclaimed=reclaimed)
