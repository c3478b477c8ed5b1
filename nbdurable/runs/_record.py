"""The runtime's persisted records: a run (:class:`RuntimeRun`) and a tool call's intent.

The runtime writes them through :class:`~nbdurable.durable.store.RunStore`;
inspection, the CLI, the server and the notebook read them. Both are frozen: a
change is a copy (``model_copy``) that a store writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer
from pydantic_core import PydanticSerializationError, to_json

from .._text import valid_data
from ..messages import Message, ResponseKind, ToolApprovalResponse, VerdictSource
from ._states import TERMINAL_STATES, RunState

__all__ = [
    "Decision",
    "EMBEDDED",
    "RESTATE",
    "TEMPORAL",
    "DependencyPolicy",
    "LateResult",
    "RunKind",
    "RuntimeRun",
    "ToolIntent",
]

RunKind = Literal["agent", "task"]
DependencyPolicy = Literal["fail", "pause"]
EMBEDDED = "embedded"
"""``RuntimeRun.engine`` of a run submitted to the embedded engine."""
TEMPORAL = "temporal"
"""``RuntimeRun.engine`` of a run submitted to the Temporal engine."""
RESTATE = "restate"
"""``RuntimeRun.engine`` of a run submitted to the Restate engine."""


class LateResult(BaseModel):
    """A tool call's outcome from an owner that had lost the run (fenced out).

    A worker paused past its lease (SIGSTOP, a suspended VM, a long GC) wakes up
    and finishes the call it was running: its effect happened, but the run
    belongs to another owner now, so its result is never recorded as the
    call's. It is kept on the run record as this, and announced by a
    ``tool_late_result`` event, so whoever decides the call next (``retry()``
    runs it again) knows it already ran.

    Attributes:
        tool_call_id: The call.
        tool_name: Its tool.
        step_index: Its step.
        fence: The fencing token the late owner held (the run's was newer).
        owner: The late owner's lease holder (``describe_holder`` names its
            process); None where the engine keeps no lease (Temporal).
        at: When it tried to record the outcome (epoch ms).
        outcome: ``result``: the call finished and returned ``result``;
            ``cut_off``: the call was still running when the owner learned it
            had lost the run and stopped it (its effect is unknown).
        result: The tool result part's JSON (``is_error`` for a tool's error),
            for ``result``; None for ``cut_off``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_call_id: str
    tool_name: str
    step_index: int
    fence: int
    owner: str | None = None
    at: int
    outcome: Literal["result", "cut_off"] = "result"
    result: dict[str, Any] | None = None


class Decision(BaseModel):
    """A verdict as the run record keeps it (:attr:`RuntimeRun.decided`), for good.

    Its leg's copy (:attr:`RuntimeRun.verdicts`) is used up when the run goes
    on; this one stays, so anyone can tell who decided an approval, how and when.
    Stored as it was when records kept plain dicts: ``source`` is absent, not
    null, where none was recorded.

    Attributes:
        approved: The verdict.
        reason: Why (a denial's reason, shown to the model).
        token_sha256: The SHA-256 of the approving token (the token itself is
            never kept here); None for a denial or a tokenless approval.
        at: When it was recorded (epoch ms).
        source: Who gave it, and how; None for verdicts from before sources.
        arguments: An approval with edits: the arguments the call runs with
            (who edited them and when are ``source`` and ``at``).
        original_arguments: With ``arguments``: the call's arguments as the
            model gave them (what the token binds).
        reply: A reply: the human's answer, the call's result in place of the tool.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    approved: bool
    reason: str | None = None
    token_sha256: str | None = None
    at: int = 0
    source: VerdictSource | None = None
    arguments: dict[str, Any] | None = None
    original_arguments: dict[str, Any] | None = None
    reply: str | None = None

    @property
    def kind(self) -> ResponseKind:
        """What the verdict did: ``approved``, ``edited`` (with edits), ``denied``, ``replied``."""
        if self.approved:
            return "approved" if self.arguments is None else "edited"
        return "denied" if self.reply is None else "replied"

    @property
    def outcome(self) -> Literal["approved", "denied", "replied"]:
        """The verdict in one word as conflicts name it (an edit is an approval)."""
        kind = self.kind
        return "approved" if kind == "edited" else kind

    @model_serializer(mode="wrap")
    def _stored_form(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # no key for what was not recorded: the form records were stored in before
        # sources, edits and replies existed
        return {k: v for k, v in handler(self).items() if k not in _ADDED_LATER or v is not None}


_ADDED_LATER = frozenset({"source", "arguments", "original_arguments", "reply"})


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
            the leg that applied it (:class:`Decision`). One verdict per
            approval: see :func:`~nbdurable.runs.decide`.
        retried: ``retry()`` let the failed or needs_attention run go on: its
            next leg's ``run_started`` event says ``retried: true`` (cleared then).
        previous_owner: The lease holder the current owner took the run over
            from (its lease lapsed, or its process was gone); None when the
            current claim took a released run.
        engine: The engine the run was submitted to, ``embedded`` or
            ``temporal``: only that engine's runtimes and workers claim, resume
            or fail it. None for runs recorded before engines were recorded
            (any engine may take them, as then).
        notified: Keys of the notifications claimed for the run (an approval
            id, or ``needs_attention@<fence>``): each is sent by the one process
            that claimed it (see :func:`~nbdurable.runs.claim_notices`).
        submitted_by: Who submitted the run: the claimed name of the submitting
            process (``NBDURABLE_USER``, else its OS user) or the HTTP bridge's
            authenticated principal; None for runs recorded before it was.
        approvers: Tool name -> the principals allowed to decide its calls
            (``Agent(approvers=...)``, saved at submission so any deciding
            process enforces it without the agent); None: anyone may.
        submitter_may_approve: False when ``submitted_by`` may not approve the
            run's calls (``Agent(submitter_may_approve=False)``).
        grants: Standing approvals (:mod:`nbdurable.runs`):
            ``{"tokens": [...], "revoked": [...]}``, the signed grant tokens and
            the ids of revoked grants; None while the run has none.
        settled_by: The graph node whose finish last settled this node
            (promoted it to ``pending`` or failed it): that finisher writes the
            node's state event, however close in time other dependencies finished.
        late_results: Tool calls an owner that had lost the run (a worker paused
            past its lease, then woken) finished or was still running when it
            learned it; its fenced writes were refused, so they are kept here
            (append-only, never the run's state, results or history) for the
            human who decides the call (:mod:`nbdurable.runs`).
        agent_origin: Where the agent's definition lives, for whoever must provide
            the agent to resume the run: ``module:attribute``, ``notebook
            NAME.ipynb, cell [N]`` or ``PATH, line N`` (None: not known).
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
    verdicts: dict[str, ToolApprovalResponse] = Field(default_factory=dict)
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
    decided: dict[str, Decision] = Field(default_factory=dict)
    retried: bool = False
    previous_owner: str | None = None
    engine: str | None = None
    trace_context: dict[str, str] | None = None
    """W3C trace context the run's legs join (``traceparent``; see nbdurable.tracing)."""
    notified: list[str] = Field(default_factory=list)
    submitted_by: str | None = None
    approvers: dict[str, list[str]] | None = None
    submitter_may_approve: bool = True
    grants: dict[str, list[str]] | None = None
    settled_by: str | None = None
    late_results: list[LateResult] = Field(default_factory=list)
    agent_origin: str | None = None

    @property
    def prompt_value(self) -> str | Message:
        """The prompt: a string or a user message."""
        data = json.loads(self.prompt)
        return data if isinstance(data, str) else Message.model_validate(data)

    @property
    def finished(self) -> bool:
        """Whether the run is completed, failed or cancelled."""
        return self.state in TERMINAL_STATES

    def approval_responses(self) -> list[ToolApprovalResponse]:
        """The collected verdicts as responses for the next leg."""
        return list(self.verdicts.values())

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` set; a name that is no field is a ``TypeError``, never kept.

        Records are changed with :class:`~nbdurable.runs.RunPatch`, whose fields
        are typed; this catches a misspelt name on any other path too.
        """
        unknown = sorted((update or {}).keys() - _RUN_FIELDS)
        if unknown:
            raise TypeError(f"a run record has no field {', '.join(map(repr, unknown))}")
        return super().model_copy(update=update, deep=deep)

    @model_serializer(mode="wrap")
    def _valid_text(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Updates (model_copy) skip validation: errors and reasons quoting an
        # exception may hold lone surrogates, so the stored form gets U+FFFD.
        return valid_data(handler(self))

    def stored_json(self) -> str:
        """The record as stores keep it: what ``model_dump_json()`` gives, sooner.

        The fields serialized as they are, in one call: the usual record holds
        no lone surrogate, which the serializer refuses; one that does (or
        anything else it refuses) goes through :meth:`model_dump_json`, whose
        wrap first builds the whole record as Python data and checks it. A
        runtime step writes its record twice (issue 42).
        """
        try:
            return to_json(self.__dict__).decode()
        except (PydanticSerializationError, ValueError):
            return self.model_dump_json()


_RUN_FIELDS = frozenset(RuntimeRun.model_fields)


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
