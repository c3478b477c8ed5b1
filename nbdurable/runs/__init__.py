"""Run records: the runtime's record of a run, and every rule about it.

The record (:class:`RuntimeRun`, a tool call's :class:`ToolIntent`, a
:class:`LateResult`) and its typed change (:class:`RunPatch`); the run states and
the sets of them the package tests membership in; who holds a lease; who runs next
(scheduling); verdicts and who may decide them; standing approvals (grants);
late results; notification claims. Every rule here is a pure function over
records: stores apply them inside the transaction that writes their result
(:class:`~nbdurable.durable.store.RunStore`), so each rule is the same
for every store.

Standard library and pydantic only, like :mod:`nbdurable.durable` (the layer it
belongs to): no file or database code lives here.
"""

from ._attention import (
    ACTIONS,
    AttentionAction,
    attention_decisions,
    attention_key,
    decided_action,
)
from ._deciders import (
    check_decider,
    check_minter,
    claimed_user,
    valid_name,
)
from ._grants import (
    Grant,
    RunGrants,
    normalize_match,
    rule_matches,
    sign_grant,
    verify_grant,
    with_grant_change,
)
from ._late_results import (
    MAX_LATE_RESULTS,
    late_result_line,
    late_results_of,
    undecided_late_results,
    with_late_result,
)
from ._leases import (
    describe_holder,
    holder_process,
    lease_holder,
    process_gone,
    this_process,
)
from ._notices import (
    claim_notices,
)
from ._patch import UNSET, RunPatch
from ._record import (
    EMBEDDED,
    RESTATE,
    TEMPORAL,
    Decision,
    DependencyPolicy,
    LateResult,
    RunKind,
    RuntimeRun,
    ToolIntent,
)
from ._scheduling import (
    Served,
    after_finish,
    claim,
    claimable,
    definition_matches,
    mismatch_reason,
    next_state,
    of_engine,
    served,
    settle_graph,
    unclaimable_by_definition,
    unserved_reason,
)
from ._stalled import STALLED, Stalled, stalled
from ._states import (
    ACTIVE_STATES,
    BUSY_STATES,
    CLAIMABLE_STATES,
    GRAPH_SETTLED_STATES,
    GRAPH_STATUSES,
    HUMAN_STATES,
    QUEUED_STATES,
    REASON_STATES,
    RETRYABLE_STATES,
    RUN_STATES,
    SETTLED_OK_STATES,
    STOP_STATES,
    TERMINAL_STATES,
    UNFINISHED_STATES,
    UNSUCCESSFUL_STATES,
    RunState,
    graph_status,
)
from ._verdicts import (
    VIAS,
    Verdict,
    approval_expired,
    claimed_source,
    decided_phrase,
    decision,
    latest_verdict,
    verdict_line,
    who_decided,
)

__all__ = [
    "ACTIONS",
    "AttentionAction",
    "attention_decisions",
    "attention_key",
    "decided_action",
    "Decision",
    "UNSET",
    "RunPatch",
    "ACTIVE_STATES",
    "STALLED",
    "Stalled",
    "BUSY_STATES",
    "CLAIMABLE_STATES",
    "GRAPH_SETTLED_STATES",
    "DependencyPolicy",
    "EMBEDDED",
    "RESTATE",
    "GRAPH_STATUSES",
    "Grant",
    "HUMAN_STATES",
    "LateResult",
    "MAX_LATE_RESULTS",
    "QUEUED_STATES",
    "REASON_STATES",
    "RETRYABLE_STATES",
    "RUN_STATES",
    "RunGrants",
    "RunKind",
    "RunState",
    "RuntimeRun",
    "SETTLED_OK_STATES",
    "STOP_STATES",
    "Served",
    "TEMPORAL",
    "TERMINAL_STATES",
    "ToolIntent",
    "UNFINISHED_STATES",
    "UNSUCCESSFUL_STATES",
    "VIAS",
    "Verdict",
    "after_finish",
    "approval_expired",
    "check_decider",
    "check_minter",
    "claim",
    "claim_notices",
    "claimable",
    "claimed_source",
    "claimed_user",
    "decision",
    "latest_verdict",
    "decided_phrase",
    "definition_matches",
    "describe_holder",
    "graph_status",
    "holder_process",
    "late_result_line",
    "late_results_of",
    "lease_holder",
    "mismatch_reason",
    "next_state",
    "normalize_match",
    "of_engine",
    "process_gone",
    "rule_matches",
    "served",
    "stalled",
    "settle_graph",
    "sign_grant",
    "this_process",
    "unclaimable_by_definition",
    "undecided_late_results",
    "unserved_reason",
    "valid_name",
    "verdict_line",
    "verify_grant",
    "who_decided",
    "with_grant_change",
    "with_late_result",
]
