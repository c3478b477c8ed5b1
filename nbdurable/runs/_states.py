"""The runtime's run states, and every set of them the package tests membership in.

Run states live in the store's run records, not in checkpoints (a checkpoint's
``status`` is the loop's: running, suspended, completed). Every module that asks
"is this run over?", "does it wait for a human?" or "is the runtime still moving
it?" uses the sets below, so a new state is added in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from ._record import RuntimeRun

__all__ = [
    "ACTIVE_STATES",
    "BUSY_STATES",
    "CLAIMABLE_STATES",
    "GRAPH_SETTLED_STATES",
    "GRAPH_STATUSES",
    "HUMAN_STATES",
    "QUEUED_STATES",
    "REASON_STATES",
    "RETRYABLE_STATES",
    "RUN_STATES",
    "SETTLED_OK_STATES",
    "STOP_STATES",
    "TERMINAL_STATES",
    "UNFINISHED_STATES",
    "UNSUCCESSFUL_STATES",
    "RunState",
    "graph_status",
]

RunState = Literal[
    "queued",
    "pending",
    "running",
    "retry_wait",
    "waiting_approval",
    "needs_attention",
    "cancelling",
    "completed",
    "failed",
    "cancelled",
]
RUN_STATES: tuple[str, ...] = get_args(RunState)
"""Every run state, in lifecycle order."""

TERMINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
"""Final states: a run in one never changes again (unless ``retry()`` lets a failed run go on)."""
UNSUCCESSFUL_STATES: frozenset[str] = TERMINAL_STATES - {"completed"}
"""Final states of a run that did not complete."""
UNFINISHED_STATES: frozenset[str] = frozenset(RUN_STATES) - TERMINAL_STATES
"""Every state but the final ones."""
HUMAN_STATES: frozenset[str] = frozenset({"waiting_approval", "needs_attention"})
"""States only a human decision ends (an approval, a retry or a cancel)."""
STOP_STATES: frozenset[str] = TERMINAL_STATES | HUMAN_STATES
"""States a run stays in until someone acts, if ever: where a follower stops watching."""
BUSY_STATES: frozenset[str] = UNFINISHED_STATES - HUMAN_STATES
"""States the runtime moves a run on from by itself: it is queued, runs or will run again."""
ACTIVE_STATES: frozenset[str] = frozenset({"running", "cancelling"})
"""States that hold a concurrency slot (and a lease)."""
CLAIMABLE_STATES: frozenset[str] = frozenset({"pending", "retry_wait"})
"""States an engine claims a run from (a ``retry_wait`` run once its next attempt is due)."""
QUEUED_STATES: frozenset[str] = frozenset({"queued", "pending"})
"""States of a run that waits for its first claim: behind a slot or a dependency, or ready."""
RETRYABLE_STATES: frozenset[str] = frozenset({"failed", "needs_attention"})
"""States ``retry()`` moves a run on from."""
REASON_STATES: frozenset[str] = UNSUCCESSFUL_STATES | {"needs_attention"}
"""States whose record's ``reason`` says why the run stopped short."""
SETTLED_OK_STATES: frozenset[str] = frozenset({"completed", "waiting_approval"})
"""States a leg ends in without an error: the run completed, or it waits for an approval."""
GRAPH_SETTLED_STATES: frozenset[str] = RETRYABLE_STATES | {"pending"}
"""States a graph's settling write leaves a node in: ready, or failed or paused by a dependency."""

DEPENDENCY_FAILED = "dependency_failed"
"""The reason of a graph node failed or paused because a dependency failed or was cancelled."""

GRAPH_STATUSES: tuple[str, ...] = (
    "running",
    "waiting_approval",
    "needs_attention",
    "completed",
    "failed",
    "cancelled",
)
"""Every status :func:`graph_status` gives, in lifecycle order."""


def graph_status(records: Sequence[RuntimeRun]) -> str:
    """A graph's status, derived from its nodes' states.

    ``completed`` when every node completed; ``failed`` when every node is
    finished and some failed (``cancelled`` when the unsuccessful ones were all
    cancelled); otherwise ``needs_attention`` or ``waiting_approval`` when some
    node waits for a human, else ``running``.
    """
    states = [r.state for r in records]
    if states and all(s == "completed" for s in states):
        return "completed"
    if all(s in TERMINAL_STATES for s in states):
        unsuccessful = [s for s in states if s != "completed"]
        return "cancelled" if all(s == "cancelled" for s in unsuccessful) else "failed"
    if "needs_attention" in states:
        return "needs_attention"
    if "waiting_approval" in states:
        return "waiting_approval"
    return "running"
