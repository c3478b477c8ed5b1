"""The runtime's persisted run records, and the store seam that keeps them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from .._errors import ApprovalNotPendingError, FencedOutError
from .._text import valid_data
from ..durable.store import RUNTIME
from ..messages import Message, ToolApprovalResponse
from .prompts import Prompt

__all__ = [
    "ACTIVE_STATES",
    "DEPENDENCY_FAILED",
    "RUNTIME",
    "TERMINAL_STATES",
    "UNFINISHED_STATES",
    "FencedOutError",
    "RunState",
    "RuntimeRun",
    "RuntimeStore",
    "ToolIntent",
    "claim",
    "claimable",
    "decide",
    "next_state",
    "verdict_entry",
    "after_finish",
    "settle_graph",
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
TERMINAL_STATES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
UNFINISHED_STATES: frozenset[str] = frozenset(
    {
        "queued",
        "pending",
        "running",
        "retry_wait",
        "waiting_approval",
        "needs_attention",
        "cancelling",
    }
)
ACTIVE_STATES: frozenset[str] = frozenset({"running", "cancelling"})
"""States that hold a concurrency slot."""
DEPENDENCY_FAILED = "dependency_failed"
"""The reason of a graph node failed or paused because a dependency failed or was cancelled."""
RunKind = Literal["agent", "task"]
DependencyPolicy = Literal["fail", "pause"]


class RuntimeRun(BaseModel):
    """A run as the runtime persists it (the store's run record).

    Attributes:
        run_id: The run.
        agent_id: The agent it runs.
        agent_version: The registration it was submitted under (it resumes under it).
        session_id: Its session: runs of a session execute one after the other.
        request_id: Deduplication key of the submission, if any.
        prompt: Canonical JSON of the prompt (a string or a user message).
        state: The run state.
        reason: Why it is failed, cancelled or needs attention.
        error: The last error, ``"<type>: <message>"``.
        seq: Global submission order (FIFO within a session).
        created_at: Epoch ms of submission.
        updated_at: Epoch ms of the last change.
        next_attempt_at: When a ``retry_wait`` run becomes eligible (epoch ms).
        deadline_at: When the run times out (epoch ms), if it has a timeout.
        model_attempts: Attempts used by the current model operation (persisted
            before each attempt, so a crash uses one up).
        retry_policy: The model retry policy saved at submission.
        stream: Whether model deltas are persisted.
        max_steps: The run's step budget.
        operations: Model calls plus tool calls so far, across legs.
        lease_owner: The runtime executing it, while it runs.
        lease_expires_at: When the lease lapses unless renewed (epoch ms).
        fence: Fencing token: grows with every claim; every write checks it.
        verdicts: Approval responses collected while waiting, by approval id.
        result_text: The final text of a completed run.
        rerun_tool_calls: Interrupted ``manual`` tool calls a human allowed to run again.
        kind: ``agent`` (a run of an agent) or ``task`` (a custom task: ``agent_id``
            and ``agent_version`` name the task definition, ``prompt`` holds its
            JSON input, ``result_text`` its final JSON state).
        graph_id: The graph the run is a node of (:meth:`DurableRuntime.submit_graph`).
        node_id: Its node id in the graph.
        depends_on: Run ids of the graph nodes it waits for (``queued`` until they complete).
        on_dependency_failure: ``fail`` (the node fails with reason
            ``dependency_failed``) or ``pause`` (it waits in ``needs_attention``
            until the failed dependency is retried and completes).
        owner_run_id: The task run that spawned this (owned) agent run.
        phase: A task run's checkpointed phases so far.
        fingerprint: The fingerprint of the agent definition the run was submitted
            under (None for runs recorded before fingerprints: any runtime with
            the ``(agent, version)`` may claim them).
        waiting_reason: What the run waits for outside itself, in one line
            (a runtime with a matching definition, a worker serving its
            version, ...); None when it waits for nothing external.
        decided: Every verdict recorded on the run, by approval id, kept after
            the leg that applied it: ``approved``, ``reason``, ``token_sha256``
            (of the approving token), ``at`` (epoch ms). One verdict per
            approval: see :func:`decide`.
        retried: ``retry()`` let the failed or needs_attention run go on: its
            next leg's ``run_started`` event says ``retried: true`` (cleared then).
        previous_owner: The lease holder the current owner took the run over
            from (its lease lapsed, or its process was gone); None when the
            current claim took a released run.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    agent_id: str
    agent_version: str
    session_id: str
    request_id: str | None = None
    prompt: str
    state: RunState
    reason: str | None = None
    error: str | None = None
    seq: int = 0
    created_at: int
    updated_at: int
    next_attempt_at: int | None = None
    deadline_at: int | None = None
    model_attempts: int = 0
    retry_policy: dict[str, int] | None = None
    stream: bool = False
    max_steps: int = 20
    operations: int = 0
    lease_owner: str | None = None
    lease_expires_at: int | None = None
    fence: int = 0
    verdicts: dict[str, dict[str, Any]] = Field(default_factory=dict)
    result_text: str | None = None
    rerun_tool_calls: list[str] = Field(default_factory=list)
    kind: RunKind = "agent"
    graph_id: str | None = None
    node_id: str | None = None
    depends_on: list[str] = Field(default_factory=list)
    on_dependency_failure: DependencyPolicy = "fail"
    owner_run_id: str | None = None
    phase: int = 0
    fingerprint: str | None = None
    waiting_reason: str | None = None
    decided: dict[str, dict[str, Any]] = Field(default_factory=dict)
    retried: bool = False
    previous_owner: str | None = None
    trace_context: dict[str, str] | None = None
    """W3C trace context the run's legs join (``traceparent``; see nbdurable.tracing)."""

    @property
    def prompt_value(self) -> Prompt:
        """The prompt: a string or a user message."""
        data = json.loads(self.prompt)
        return data if isinstance(data, str) else Message.model_validate(data)

    @property
    def finished(self) -> bool:
        """Whether the run is completed, failed or cancelled."""
        return self.state in TERMINAL_STATES

    def approval_responses(self) -> list[ToolApprovalResponse]:
        """The collected verdicts as responses for the next leg."""
        return [ToolApprovalResponse.model_validate(v) for v in self.verdicts.values()]

    @model_serializer(mode="wrap")
    def _valid_text(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Updates (model_copy) skip validation: errors and reasons quoting an
        # exception may hold lone surrogates, so the stored form gets U+FFFD.
        return valid_data(handler(self))


def next_state(session_busy: bool) -> RunState:
    """State of a new submission: queued behind an unfinished run of its session, or pending."""
    return "queued" if session_busy else "pending"


def claimable(run: RuntimeRun, now: int, agents: set[tuple[str, str]], kind: str = "agent") -> bool:
    """Whether a claim may take ``run``, the oldest unfinished run of its session.

    It must be of ``kind``, its registration (or task definition) must be
    served, and it must be pending, in retry_wait past ``next_attempt_at``, or
    running/cancelling under an expired lease.
    """
    if run.kind != kind or (run.agent_id, run.agent_version) not in agents:
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
    return run.model_copy(
        update={
            "state": "cancelling" if run.state == "cancelling" else "running",
            "lease_owner": owner,
            "lease_expires_at": now + lease_ms,
            "fence": run.fence + 1,
            "next_attempt_at": None,
            "updated_at": now,
            "previous_owner": run.lease_owner if run.state in ACTIVE_STATES else None,
        }
    )


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
            session_head.model_copy(update={"state": "pending", "updated_at": finished.updated_at})
        )
    if graph:
        changed.extend(settle_graph(graph, finished.updated_at))
    return changed


def settle_graph(runs: Sequence[RuntimeRun], now: int) -> list[RuntimeRun]:
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
            update: dict[str, Any]
            if all(dep is not None and dep.state == "completed" for dep in deps):
                update = {"state": "pending", "reason": None, "error": None}
            else:
                broken = [d for d in deps if d is not None and d.state in ("failed", "cancelled")]
                if not broken or run.state != "queued":
                    continue
                first = broken[0]
                update = {
                    "state": "failed" if run.on_dependency_failure == "fail" else "needs_attention",
                    "reason": DEPENDENCY_FAILED,
                    "error": f"dependency {first.node_id or first.run_id!r} {first.state}",
                }
            by_id[run.run_id] = changed[run.run_id] = run.model_copy(
                update={**update, "updated_at": now}
            )
            progress = True
    return sorted(changed.values(), key=lambda r: r.seq)


class ToolIntent(BaseModel):
    """The record a tool call writes before it runs (and completes after).

    Attributes:
        run_id: The run.
        tool_call_id: The model-issued call id.
        tool_name: The tool.
        step_index: The step of the call.
        state: ``started`` (it may have run, partly or fully) or ``completed``.
        result: The tool result part's JSON, once completed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    tool_call_id: str
    tool_name: str
    step_index: int
    state: Literal["started", "completed"]
    result: dict[str, Any] | None = None


@runtime_checkable
class RuntimeStore(Protocol):
    """What the runtime needs from a store (the ``runtime`` capability).

    Every method that changes a run takes the caller's ``fence`` when the caller
    executes the run; a stale fence raises :class:`FencedOutError` and changes
    nothing. All methods are synchronous (the SQL stores are quick, local).
    """

    def rt_insert(
        self, run: RuntimeRun, *, enqueue: bool, max_pending: int
    ) -> tuple[RuntimeRun, bool]:
        """Insert a submitted run: ``(run, True)``, or ``(original, False)`` on a repeat.

        ``max_pending`` bounds the unfinished runs of the run's ``kind`` (agent
        runs and tasks are counted apart).

        Sets ``seq`` and ``state`` (queued behind an unfinished run of its
        session, else pending); a repeated request id returns the original run.

        Raises:
            DurableConflictError: The session is busy and ``enqueue`` is False, or
                the request id was used for a different prompt.
            LimitExceededError: ``max_pending`` unfinished runs exist already.
        """
        ...

    def rt_insert_many(self, runs: Sequence[RuntimeRun], *, max_pending: int) -> list[RuntimeRun]:
        """Insert a batch of new runs at once (a graph's nodes), each in its own session.

        Every run keeps the ``state`` it comes with (``queued`` or ``pending``);
        ``seq`` is assigned in batch order. All or nothing.

        Raises:
            DurableConflictError: A run id exists already.
            LimitExceededError: ``max_pending`` unfinished agent runs would be exceeded.
        """
        ...

    def rt_get(self, run_id: str) -> RuntimeRun | None:
        """The record of a run, or None."""
        ...

    def rt_graph(self, graph_id: str) -> list[RuntimeRun]:
        """The runs of a graph, in submission order."""
        ...

    def rt_list(self, states: Sequence[str] | None = None) -> list[RuntimeRun]:
        """Records in submission order, optionally only those in ``states``."""
        ...

    def rt_session(self, session_id: str, states: Sequence[str]) -> list[RuntimeRun]:
        """One session's records in ``states``, in submission order."""
        ...

    def rt_update(
        self, run_id: str, changes: dict[str, Any], *, fence: int | None = None
    ) -> RuntimeRun:
        """Apply ``changes`` to a run record.

        A run reaching a terminal state promotes the next queued run of its
        session to pending, and settles its graph's waiting nodes
        (:func:`settle_graph`), in the same write.

        Raises:
            FencedOutError: ``fence`` is not the run's current fence.
            RunNotFoundError: No such run.
        """
        ...

    def rt_claim(
        self,
        owner: str,
        now: int,
        lease_ms: int,
        agents: Sequence[tuple[str, str]],
        kind: str = "agent",
    ) -> RuntimeRun | None:
        """Atomically take the next eligible run of ``kind`` with (agent, version) in ``agents``.

        Eligible: the oldest unfinished run of its session that is pending, or
        in retry_wait past ``next_attempt_at``, or running/cancelling with an
        expired lease (its owner died). Sets the lease and bumps the fence.
        A store with a clock of its own (PostgreSQL's) judges and sets leases
        by that clock; ``now`` still dates the rest (``retry_wait``, ``updated_at``).
        """
        ...

    def rt_renew(
        self, run_id: str, owner: str, fence: int, until: int, *, lease_ms: int | None = None
    ) -> bool:
        """Extend a held lease; False when the lease is no longer ours.

        A store with a clock of its own (PostgreSQL's) extends the lease to its
        clock plus ``lease_ms`` when given; the others to ``until``.
        """
        ...

    def rt_intent(self, intent: ToolIntent, *, fence: int) -> None:
        """Write (or complete) a tool intent, fenced."""
        ...

    def rt_intents(self, run_id: str) -> list[ToolIntent]:
        """A run's tool intents."""
        ...

    def rt_journal(self, run_id: str, step_index: int, response: str, *, fence: int) -> None:
        """Record a completed model response of a step, fenced."""
        ...

    def rt_journaled(self, run_id: str, step_index: int) -> str | None:
        """The journaled model response of a step, if any."""
        ...

    def rt_verdict(
        self,
        run_id: str,
        approval_id: str,
        response: dict[str, Any],
        pending_ids: Sequence[str],
        *,
        now: int,
    ) -> tuple[RuntimeRun, bool]:
        """Record one verdict, conditionally, in one transaction (see :func:`decide`).

        ``response`` is the :class:`~nbdurable.messages.ToolApprovalResponse`'s
        JSON; ``pending_ids`` the approvals the run's checkpoint waits for.
        Returns ``(run, True)`` when the verdict was recorded, ``(run, False)``
        when that same verdict was recorded before (a retry: nothing changes).

        Raises:
            ApprovalNotPendingError: Another verdict won, or the run no longer waits.
            RunNotFoundError: No such run.
        """
        ...


def verdict_entry(response: dict[str, Any], now: int) -> dict[str, Any]:
    """What :attr:`RuntimeRun.decided` keeps of a verdict (the token only as a digest)."""
    token = response.get("token")
    return {
        "approved": bool(response.get("approved")),
        "reason": response.get("reason"),
        "token_sha256": hashlib.sha256(token.encode()).hexdigest() if token else None,
        "at": now,
    }


def decide(
    run: RuntimeRun,
    approval_id: str,
    response: dict[str, Any],
    pending_ids: Sequence[str],
    now: int,
) -> RuntimeRun | None:
    """``run`` with one more verdict, or None when that same verdict is recorded already.

    A pure function; stores call it inside the transaction that writes its
    result, so of two verdicts on one approval, from any processes, exactly one
    is recorded. It applies only while the run is ``waiting_approval`` on
    ``approval_id`` and no verdict on it was recorded. The same verdict again
    (approved both times with the same token, or denied both times) is a
    repeat, not a conflict: the caller reports the original success. The run
    becomes ``pending`` once every approval in ``pending_ids`` has a verdict.

    Raises:
        ApprovalNotPendingError: Another verdict was recorded (``verdict`` names
            it), or the run does not wait for the approval (``state``).
    """
    entry = verdict_entry(response, now)
    earlier = run.decided.get(approval_id)
    if earlier is None and approval_id in run.verdicts:  # recorded before ``decided`` existed
        earlier = verdict_entry(run.verdicts[approval_id], run.updated_at)
    if earlier is not None:
        same = earlier.get("approved") == entry["approved"] and (
            not entry["approved"] or earlier.get("token_sha256") == entry["token_sha256"]
        )
        if same:
            return None
        winner = "approved" if earlier.get("approved") else "denied"
        raise ApprovalNotPendingError(run.run_id, approval_id, verdict=winner, state=run.state)
    if run.state != "waiting_approval" or approval_id not in pending_ids:
        raise ApprovalNotPendingError(run.run_id, approval_id, state=run.state)
    verdicts = {**run.verdicts, approval_id: response}
    answered = all(pending in verdicts for pending in pending_ids)
    return run.model_copy(
        update={
            "state": "pending" if answered else "waiting_approval",
            "verdicts": verdicts,
            "decided": {**run.decided, approval_id: entry},
            "updated_at": now,
        }
    )
