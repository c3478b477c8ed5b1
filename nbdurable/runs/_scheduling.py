"""Who runs next: pure functions over run records that every store's claim applies.

A store calls them inside the transaction that writes their result, so the
rules are the same for every store and each decision is atomic with its write:
which run a claim may take (:func:`claimable`), the lease it takes
(:func:`claim`), and what a finished run changes for the others
(:func:`after_finish`, :func:`settle_graph`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ..durable._definitions import ServedDefinition, difference, parts_of
from ._patch import RunPatch
from ._record import EMBEDDED, RuntimeRun
from ._states import ACTIVE_STATES, DEPENDENCY_FAILED, UNSUCCESSFUL_STATES, RunState

__all__ = [
    "Served",
    "after_finish",
    "claim",
    "claimable",
    "definition_matches",
    "mismatch_reason",
    "next_state",
    "of_engine",
    "served",
    "settle_graph",
    "unclaimable_by_definition",
    "unserved_reason",
]


def next_state(session_busy: bool) -> RunState:
    """State of a new submission: queued behind an unfinished run of its session, or pending."""
    return "queued" if session_busy else "pending"


Definition = str | ServedDefinition | None
"""A served ``(id, version)``'s definition: its fingerprint, a registration that compares
itself with runs (:class:`~nbdurable.durable._definitions.ServedDefinition`), or None (any)."""

Served = Mapping[tuple[str, str], Definition] | Collection[tuple[str, str]]
"""What a runtime executes: ``(id, version) -> definition`` (None: any definition), or the keys."""


def served(agents: Served) -> Mapping[tuple[str, str], Definition]:
    """``agents`` as ``(id, version) -> definition`` (None where no fingerprint is known)."""
    if isinstance(agents, Mapping):
        return agents
    return dict.fromkeys(agents)


def of_engine(run: RuntimeRun, engine: str) -> bool:
    """Whether ``engine`` may claim, resume or fail ``run``: the engine it was submitted to.

    A run recorded before engines were recorded (``engine`` None) belongs to any.
    """
    return run.engine is None or run.engine == engine


def claimable(run: RuntimeRun, now: int, agents: Served, kind: str = "agent") -> bool:
    """Whether a claim may take ``run``, the oldest unfinished run of its session.

    Claims are the embedded engine's: the run must be of that engine
    (:func:`of_engine`). It must be of ``kind``, its registration (or task definition) must be
    served with the definition it was submitted under (:func:`definition_matches`),
    and it must be pending, in retry_wait past ``next_attempt_at``, or
    running/cancelling under an expired lease.
    """
    return _eligible(run, now, kind, EMBEDDED) and definition_matches(run, agents) is True


def definition_matches(run: RuntimeRun, agents: Served) -> bool | None:
    """Whether ``agents`` serve ``run``'s ``(agent, version)`` with its definition.

    None when they do not serve that ``(agent, version)`` at all; False when
    they serve it under another fingerprint. A run recorded without a
    fingerprint, or a runtime that names no fingerprint, matches any definition.
    A served fingerprint matches only an equal one; a served registration
    (:class:`~nbdurable.durable._definitions.ServedDefinition`) decides itself,
    so it can also accept a run fingerprinted under the previous scheme.
    """
    table = served(agents)
    key = (run.agent_id, run.agent_version)
    if key not in table:
        return None
    mine = table[key]
    if run.fingerprint is None or mine is None:
        return True
    if isinstance(mine, str):
        return mine == run.fingerprint
    return mine.accepts(run)


def mismatch_reason(run: RuntimeRun, agents: Served | None = None) -> str:
    """The waiting reason of a run no runtime with its submitted definition serves yet.

    With ``agents`` (what the runtime that saw the run serves), the reason also
    says what that runtime's definition differs in (``...; a runtime that saw it
    differs in its tools (sweep changed)``), part by part
    (:func:`~nbdurable.durable._definitions.difference`).
    """
    reason = _mismatch_prefix(run)
    mine = served(agents).get((run.agent_id, run.agent_version)) if agents is not None else None
    theirs = mine if isinstance(mine, str) or mine is None else mine.fingerprint
    detail = difference(run.fingerprint, theirs)
    if detail is None:
        return reason
    subject = "a runtime that saw it" if parts_of(run.fingerprint) is not None else "it"
    return f"{reason}; {subject} {detail}"


def _mismatch_prefix(run: RuntimeRun) -> str:
    return (
        f"waits for a runtime whose {run.agent_id} v{run.agent_version} "
        "matches the submitted definition"
    )


def unserved_reason(run: RuntimeRun) -> str:
    """The waiting reason of a run no worker serving its ``(agent, version)`` has taken yet."""
    return f"waits for a worker serving {run.agent_id} v{run.agent_version}"


def unclaimable_by_definition(
    run: RuntimeRun, now: int, agents: Served, kind: str = "agent", engine: str = EMBEDDED
) -> RuntimeRun | None:
    """``run`` with its waiting reason recorded, when only ``agents`` keep it from a claim.

    Eligible, and either served under another fingerprint
    (:func:`mismatch_reason`, naming what differs) or not served at all
    (:func:`unserved_reason`), and the reason not yet recorded (so a store
    writes it once, not at every poll); else None. A definition mismatch is the
    more specific reason: a runtime serving other agents never overwrites it,
    nor does a runtime whose definition differs otherwise (the first that saw
    the run says what its own differs in), so runtimes serving different
    things do not take turns rewriting the record. Stores write the
    returned record in the claim's own transaction; ``updated_at`` is kept (the
    run's state did not change). ``engine``: whose runtime asks (a run of
    another engine is none of its business).
    """
    if not _eligible(run, now, kind, engine):
        return None
    matches = definition_matches(run, agents)
    if matches is True:
        return None
    if matches is None:
        if run.waiting_reason is not None:
            return None
        reason = unserved_reason(run)
    else:
        if run.waiting_reason is not None and run.waiting_reason.startswith(_mismatch_prefix(run)):
            return None
        reason = mismatch_reason(run, agents)
    return RunPatch(waiting_reason=reason).apply(run)


def _eligible(run: RuntimeRun, now: int, kind: str, engine: str) -> bool:
    if run.kind != kind or not of_engine(run, engine):
        return False
    if run.state == "pending":
        return True
    if run.state == "retry_wait":
        return run.next_attempt_at is None or run.next_attempt_at <= now
    if run.state in ACTIVE_STATES:
        return run.lease_expires_at is None or run.lease_expires_at <= now
    return False


def claim(run: RuntimeRun, owner: str, now: int, lease_ms: int) -> RuntimeRun:
    """``run`` as ``owner`` holds it: a lease until ``now + lease_ms`` and the next fence."""
    return RunPatch(
        state="cancelling" if run.state == "cancelling" else "running",
        lease_owner=owner,
        lease_expires_at=now + lease_ms,
        fence=run.fence + 1,
        next_attempt_at=None,
        updated_at=now,
        previous_owner=run.lease_owner if run.state in ACTIVE_STATES else None,
        waiting_reason=None,
    ).apply(run)


def _waits_for_dependencies(run: RuntimeRun) -> bool:
    return run.state == "queued" or (
        run.state == "needs_attention" and run.reason == DEPENDENCY_FAILED
    )


def after_finish(
    finished: RuntimeRun, session_head: RuntimeRun | None, graph: Sequence[RuntimeRun]
) -> list[RuntimeRun]:
    """The other runs a run's finish changes (pure: stores write them in the same write).

    The oldest unfinished run of its session goes from ``queued`` to ``pending``; in a
    graph, the nodes :func:`settle_graph` settles.

    Args:
        finished: The run as it is now finished.
        session_head: The oldest unfinished run of its session, if any.
        graph: Every run of its graph (empty for a run outside a graph).
    """
    changed: list[RuntimeRun] = []
    if session_head is not None and session_head.state == "queued":
        changed.append(
            RunPatch(state="pending", updated_at=finished.updated_at).apply(session_head)
        )
    if graph:
        changed.extend(settle_graph(graph, finished.updated_at, by=finished.run_id))
    return changed


def settle_graph(runs: Sequence[RuntimeRun], now: int, by: str | None = None) -> list[RuntimeRun]:
    """The nodes of a graph that change now that some node finished (a pure function).

    A node waiting for its dependencies (``queued``, or paused in
    ``needs_attention`` by a failed dependency) becomes ``pending`` once every
    dependency is completed. A ``queued`` node with a failed or cancelled
    dependency follows its ``on_dependency_failure``: ``failed`` or
    ``needs_attention``, reason ``dependency_failed``. Failures cascade: a node
    failed here settles its own dependents too. Stores call this inside the
    write that finishes a node, so promotion is atomic with it and idempotent.

    Args:
        runs: Every run of the graph, as of the write (the finished node included).
        now: The write's time (``updated_at`` of the changed nodes).
        by: The node whose finish this write records (``settled_by`` of the
            changed nodes: who writes their state events).

    Returns:
        The changed records, in submission order.
    """
    by_id = {run.run_id: run for run in runs}
    changed: dict[str, RuntimeRun] = {}
    progress = True
    while progress:
        progress = False
        for run in sorted(by_id.values(), key=lambda r: r.seq):
            if not run.depends_on or not _waits_for_dependencies(run):
                continue
            deps = [by_id.get(dep) for dep in run.depends_on]
            if all(dep is not None and dep.state == "completed" for dep in deps):
                update = RunPatch(state="pending", reason=None, error=None)
            else:
                broken = [d for d in deps if d is not None and d.state in UNSUCCESSFUL_STATES]
                if not broken or run.state != "queued":
                    continue
                first = broken[0]
                update = RunPatch(
                    state="failed" if run.on_dependency_failure == "fail" else "needs_attention",
                    reason=DEPENDENCY_FAILED,
                    error=f"dependency {first.node_id or first.run_id!r} {first.state}",
                )
            settled = update | RunPatch(updated_at=now, settled_by=by)
            by_id[run.run_id] = changed[run.run_id] = settled.apply(run)
            progress = True
    return sorted(changed.values(), key=lambda r: r.seq)
