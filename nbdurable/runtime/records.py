"""The runtime's run records and their pure functions, under the runtime's import path.

They live in the ``durable`` layer (:mod:`nbdurable.durable.runtime_run`,
:mod:`~nbdurable.durable.run_states`, :mod:`~nbdurable.durable.scheduling`,
:mod:`~nbdurable.durable.verdicts`, :mod:`~nbdurable.durable.runtime_store`), below
the stores and inspection that read them; this module re-exports them.
"""

from __future__ import annotations

from .._errors import FencedOutError
from ..durable.run_states import (
    ACTIVE_STATES,
    DEPENDENCY_FAILED,
    TERMINAL_STATES,
    UNFINISHED_STATES,
    RunState,
)
from ..durable.runtime_run import DependencyPolicy, RunKind, RuntimeRun, ToolIntent
from ..durable.runtime_store import RuntimeStore
from ..durable.scheduling import (
    Served,
    after_finish,
    claim,
    claimable,
    definition_matches,
    mismatch_reason,
    next_state,
    served,
    settle_graph,
    unclaimable_by_definition,
)
from ..durable.store import RUNTIME
from ..durable.verdicts import decide, verdict_entry

__all__ = [
    "ACTIVE_STATES",
    "DEPENDENCY_FAILED",
    "RUNTIME",
    "TERMINAL_STATES",
    "UNFINISHED_STATES",
    "DependencyPolicy",
    "FencedOutError",
    "RunKind",
    "RunState",
    "RuntimeRun",
    "RuntimeStore",
    "Served",
    "ToolIntent",
    "after_finish",
    "claim",
    "claimable",
    "decide",
    "definition_matches",
    "mismatch_reason",
    "next_state",
    "served",
    "settle_graph",
    "unclaimable_by_definition",
    "verdict_entry",
]
