"""The bridge's request and response bodies (they make the OpenAPI schema precise)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .._text import valid_data
from ..durable._signer import token_issued_at
from ..messages import Message, ToolApprovalRequest
from ..runs import LateResult, RunState, RuntimeRun

__all__ = [
    "ApprovalOut",
    "InboxApprovalOut",
    "RunList",
    "RunOut",
    "SubmitIn",
    "VerdictIn",
    "VerdictOut",
]

_IN = ConfigDict(extra="forbid")


class _TextIn(BaseModel):
    r"""A request body whose strings follow the messages' lone-surrogate policy.

    The JSON parser turns ``"\udcff"`` escapes into lone surrogates, which no
    store can encode: each becomes U+FFFD, as anywhere text enters a run.
    """

    @model_validator(mode="before")
    @classmethod
    def _valid_text(cls, data: Any) -> Any:
        return valid_data(data)


MAX_TIMEOUT_S = 366 * 24 * 3600.0


class SubmitIn(_TextIn):
    """A run to submit."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"agent": "janitor", "prompt": "Clean up staging."}]},
    )

    agent: str = Field(min_length=1, max_length=200, description="A registered agent id.")
    prompt: str | Message = Field(description="A nonblank string or a user message.")
    session_id: str | None = Field(
        None, min_length=1, max_length=200, description="Runs of a session execute in turn."
    )
    request_id: str | None = Field(
        None, min_length=1, max_length=200, description="Deduplication key."
    )
    enqueue: bool = Field(False, description="Queue behind an unfinished run of the session.")
    timeout: float | None = Field(
        None, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False, description="Seconds until it fails."
    )
    max_steps: int | None = Field(None, ge=1, le=10_000, description="This run's step budget.")


class RunOut(BaseModel):
    """A run as the runtime records it."""

    run_id: str
    agent_id: str
    agent_version: str
    session_id: str
    request_id: str | None
    state: RunState
    reason: str | None
    error: str | None
    created_at: int = Field(description="Epoch ms of submission.")
    updated_at: int = Field(description="Epoch ms of the last change.")
    next_attempt_at: int | None
    deadline_at: int | None
    operations: int
    max_steps: int
    result_text: str | None
    finished: bool
    late_results: list[LateResult] = Field(
        default_factory=list,
        description="Tool calls an owner that had lost the run finished (or was still "
        "running) anyway: a needs_attention call listed here already ran once.",
    )

    @classmethod
    def of(cls, record: RuntimeRun) -> RunOut:
        """The public view of a run record (its fields of the same names)."""
        return cls.model_validate(record, from_attributes=True)


class RunList(BaseModel):
    """Runs, newest first."""

    runs: list[RunOut]


class ApprovalOut(BaseModel):
    """A pending approval: the call, its signed token and an approval link."""

    approval_id: str
    tool_call_id: str
    tool_name: str
    input: dict[str, Any]
    agent_path: list[str]
    token: str | None
    requested_at: int | None = Field(description="Epoch ms the approval was asked for.")
    allow_edit: bool = Field(
        False,
        description="Whether the tool lets the approver edit the call's arguments "
        "(`arguments` on the verdict).",
    )
    parameters: dict[str, Any] | None = Field(
        None, description="With `allow_edit`: the tool's JSON schema of its arguments (a form)."
    )
    link: str | None = Field(
        description="An approval link (works without the bearer token), minted by the caller; "
        "null when the caller may not mint one (a call the agent's approvers reserve for "
        "others) or the request was signed with a retired key."
    )

    @classmethod
    def of(cls, request: ToolApprovalRequest, link: str | None) -> ApprovalOut:
        """The public view of a pending request (its fields of the same names, as JSON)."""
        requested_at = token_issued_at(request.token)
        shown = {**request.model_dump(mode="json"), "requested_at": requested_at, "link": link}
        return cls.model_validate(shown)


class InboxApprovalOut(BaseModel):
    """An approval request of any run, with its status and verdict (``GET /approvals``)."""

    run_id: str
    approval_id: str
    tool_call_id: str | None
    tool_name: str | None
    input: dict[str, Any]
    agent_path: list[str]
    status: Literal["pending", "expired", "approved", "denied", "replied", "cancelled"] = Field(
        description="`expired`: pending with a token past the max age (a link is signed anew); "
        "`replied`: answered in place of the tool (`reply`); an approval with edits is "
        "`approved` with `edited_arguments`."
    )
    edited_arguments: dict[str, Any] | None = Field(
        None, description="An approval with edits: the arguments the call ran with."
    )
    requested_at: int | None = Field(description="Epoch ms the approval was asked for.")
    decided_at: int | None = Field(description="Epoch ms of the verdict.")
    decided_by: str | None = Field(
        description="Who decided: authenticated only when `authenticated` is true."
    )
    authenticated: bool | None
    via: str | None = Field(description="widget, magic, cli, http, link, api or grant.")
    addressed_to: str | None
    minted_by: str | None = Field(
        description="Who minted the link that decided (a link verdict): a named token's "
        "principal when `minted_via` is `http`, a claimed name for `api`."
    )
    minted_via: str | None = Field(description="How that link was minted: http, api or notify.")
    grant_id: str | None
    reason: str | None
    reply: str | None = Field(None, description="A reply: the call's result in place of the tool.")
    allow_edit: bool = Field(False, description="Whether the tool lets the approver edit the call.")
    parameters: dict[str, Any] | None = Field(
        None, description="With `allow_edit`: the tool's JSON schema of its arguments."
    )
    waited_ms: int | None = Field(
        description="Until the verdict; until now for a pending one; until the run ended."
    )
    link: str | None = Field(
        description="An approval link (works without the bearer token) while it is decidable."
    )

    @classmethod
    def of(cls, row: dict[str, Any], link: str | None) -> InboxApprovalOut:
        """The public view of a row of ``nbdurable.inspect.approvals``."""
        renamed = {"tool_name": "tool", "input": "arguments", "waited_ms": "waited"}
        fields = {name: row[renamed.get(name, name)] for name in cls.model_fields if name != "link"}
        return cls(**{**fields, "agent_path": list(row["agent_path"])}, link=link)


class VerdictIn(_TextIn):
    """A verdict on one pending approval: approve (maybe with edits), deny, or reply."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"approve": True, "token": "v1...."},
                {"approve": True, "token": "v1....", "arguments": {"name": "stg_2023"}},
                {"approve": False, "reason": "not on a Friday"},
                {"approve": False, "reply": "use the staging table instead"},
            ]
        },
    )

    approve: bool
    token: str | None = Field(
        None, max_length=65_536, description="The approval's signed token (needed to approve)."
    )
    reason: str | None = Field(None, max_length=4_000, description="Told to the model on denial.")
    arguments: dict[str, Any] | None = Field(
        None,
        description="With `approve: true`: run the call with these arguments instead (the "
        "tool must allow edits; checked against its schema, else 422). The token is the "
        "call's own, unchanged.",
    )
    reply: str | None = Field(
        None,
        min_length=1,
        max_length=65_536,
        description="With `approve: false`: answer the call in place of the tool; the text "
        "is its result (not an error).",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> VerdictIn:
        if self.arguments is not None and not self.approve:
            raise ValueError("`arguments` come only with approve: true")
        if self.reply is not None and (self.approve or self.reason is not None):
            raise ValueError("`reply` comes only with approve: false, and without `reason`")
        return self


class VerdictOut(BaseModel):
    """A recorded verdict."""

    outcome: Literal["approved", "denied", "replied"]
    message: str
    run: RunOut
