"""Every exception nbdurable raises, in one tree.

```
NbdurableError                     root: catch this to catch everything of ours
├── ConfigurationError (ValueError) invalid options, tools, scripts or registrations
│   ├── LateResultUndecidedError   a retry that would run again a call that already ran late
│   ├── EditNotAllowedError        edited arguments for a tool that does not allow editing
│   └── InvalidEditError           edited arguments that do not match the tool's schema
├── CheckpointNotFoundError        resume of a run id the store does not know
├── CheckpointVersionError         a checkpoint or store schema written by a newer version
├── StoreCorruptionError           stored bytes that do not decode as a checkpoint
├── StoreWriteError                the store refused a write: disk full, read-only, I/O error
├── StoreUnavailableError          the store kept failing (connection lost) past the retry budget
├── RunNotFoundError               an unknown run id outside of resume
├── RunEndedError                  a run or graph ended in a state a waiter did not ask for
├── WaitingForHumanError           a blocking wait stopped: the run waits for a human
├── ApprovalExpiredError           an approval token older than the maximum age (ask for a new one)
├── ApproverNotAllowedError        (PermissionError) a verdict from someone not allowed to decide
├── DurableConflictError           a write that conflicts with what is stored
│   ├── FencedOutError             a run's former owner writing after losing its lease
│   ├── LeaseLostError             a tool's ``ctx.ensure_owner()`` after its worker lost the run
│   └── ApprovalNotPendingError    a verdict for an approval that no longer waits (names the winner)
├── LimitExceededError             a configured limit was hit
└── ModelError                     a model call failed (``retryable`` says if a retry may help)
    ├── ScriptExhaustedError       a ScriptedModel was asked for more turns than it has
    ├── OutputValidationError      structured output that does not validate (retryable)
    └── ProviderError              a model provider refused or failed a request
        ├── RateLimitError         429: too many requests or tokens (retryable)
        ├── ProviderUnavailableError  overloaded or a server error, 5xx/529 (retryable)
        ├── ProviderTimeoutError   no answer in time, or the connection failed (retryable)
        ├── InvalidRequestError    400/404/413/422: the request itself is wrong (not retryable)
        └── AuthenticationError    401/403: the key is missing, wrong or not allowed (not retryable)
```

Inside a run, bad tool input, unknown tools and tool exceptions never raise:
they become ``is_error`` tool results the model can react to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ApprovalExpiredError",
    "ApprovalNotPendingError",
    "ApproverNotAllowedError",
    "CheckpointNotFoundError",
    "CheckpointVersionError",
    "ConfigurationError",
    "DurableConflictError",
    "EditNotAllowedError",
    "FencedOutError",
    "LeaseLostError",
    "LimitExceededError",
    "ModelError",
    "NbdurableError",
    "RunEndedError",
    "RunNotFoundError",
    "AuthenticationError",
    "InvalidEditError",
    "InvalidRequestError",
    "LateResultUndecidedError",
    "OutputValidationError",
    "ProviderError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RateLimitError",
    "ScriptExhaustedError",
    "StoreCorruptionError",
    "StoreUnavailableError",
    "StoreWriteError",
    "WaitingForHumanError",
]


class NbdurableError(Exception):
    """Root of every error nbdurable raises."""


class ConfigurationError(NbdurableError, ValueError):
    """Invalid options, tool definitions, scripts or registrations."""


class LateResultUndecidedError(ConfigurationError):
    """A retry refused: an interrupted call already ran on an owner that had lost the run.

    Retrying would run the call again; its late result can settle it instead
    (``run.use_late_result()``), or ``run.retry(rerun=True)`` runs it again anyway.

    Attributes:
        run_id: The run.
        late: The late results of the interrupted calls (``LateResult`` records).
    """

    def __init__(self, run_id: str, late: Sequence[Any], message: str) -> None:
        self.run_id = run_id
        self.late = tuple(late)
        super().__init__(message)


class EditNotAllowedError(ConfigurationError):
    """A verdict edits the arguments of a call whose tool does not allow it.

    Nothing was recorded: the request still waits. A tool allows edits with
    ``@tool(needs_approval=True, allow_edit=True)``.

    Attributes:
        approval_id: The approval.
        tool_name: The tool of the call.
    """

    def __init__(self, approval_id: str, tool_name: str) -> None:
        self.approval_id = approval_id
        self.tool_name = tool_name
        super().__init__(
            f"tool {tool_name!r} does not allow editing its arguments (approval "
            f"{approval_id!r}): approve, deny or reply instead; nothing was recorded "
            "and the request still waits (a tool allows it with allow_edit=True)"
        )


class InvalidEditError(ConfigurationError):
    """Edited arguments that do not validate against the tool's schema.

    Nothing was recorded: the request still waits for a verdict.

    Attributes:
        approval_id: The approval.
        tool_name: The tool of the call.
        problems: What is wrong with the arguments, one line.
    """

    def __init__(self, approval_id: str, tool_name: str, problems: str) -> None:
        self.approval_id = approval_id
        self.tool_name = tool_name
        self.problems = problems
        super().__init__(
            f"the edited arguments of approval {approval_id!r} do not fit tool "
            f"{tool_name!r}: {problems}; nothing was recorded and the request still waits"
        )


class CheckpointNotFoundError(NbdurableError):
    """No checkpoint is stored for the requested run id.

    Attributes:
        run_id: The run id that was looked up.
    """

    def __init__(self, run_id: str, message: str | None = None) -> None:
        self.run_id = run_id
        super().__init__(message or f"No checkpoint stored for run {run_id!r}.")


class CheckpointVersionError(NbdurableError):
    """Stored data carries a version this nbdurable cannot read.

    Raised for a checkpoint of an unknown version, and by a store whose schema
    was migrated by a newer nbdurable (the remedy is the same: upgrade).

    Attributes:
        version: The version found in the stored data.
        supported: The newest version this nbdurable reads.
    """

    def __init__(self, version: object, supported: int = 1, message: str | None = None) -> None:
        self.version = version
        self.supported = supported
        super().__init__(
            message
            or f"Checkpoint version {version!r} is not supported "
            f"(this nbdurable reads version {supported}); upgrade nbdurable to read it."
        )


class StoreCorruptionError(NbdurableError):
    """Stored data is not a valid checkpoint (truncated, edited or not ours).

    Attributes:
        run_id: The run whose data is corrupt, when known.
        step_index: The step of the checkpoint that could not be read, when known.
        path: The damaged file, when the store is a file (``nbdurable store check``
            tells which runs it affects).
    """

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        step_index: int | None = None,
        path: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.step_index = step_index
        self.path = path
        super().__init__(message)


class StoreUnavailableError(NbdurableError):
    """The store kept failing transiently for longer than the retry budget.

    Raised by :class:`StoreRetry` in place of the last transient error (which is
    its ``__cause__``). The runtime treats it as fatal (``on_fatal_error``), never
    as a failure of the run that made the call.

    Attributes:
        operation: What was being done (``"claim a run"``, ``"save a checkpoint"``).
        failing_ms: How long the store had been failing, in milliseconds.
        last_error: The last transient error.
    """

    def __init__(self, operation: str, failing_ms: int, last_error: BaseException) -> None:
        self.operation = operation
        self.failing_ms = failing_ms
        self.last_error = last_error
        super().__init__(
            f"the store stayed unavailable for {failing_ms / 1000:.1f} s "
            f"({operation}): {type(last_error).__name__}: {last_error}"
        )


class StoreWriteError(NbdurableError):
    """The store refused a write: the disk is full, the file is read-only, or I/O failed.

    Nothing of the refused write is stored and everything committed before it
    stays readable; a loop run logs the failed save and goes on (as for any
    failed save), and the next save works once the cause is fixed.

    Attributes:
        path: The file or directory written to.
        reason: ``"full"`` (no space left), ``"readonly"`` (a read-only file,
            directory or file system, or no permission) or ``"io"`` (an I/O error).
    """

    def __init__(self, message: str, *, path: str | None = None, reason: str = "io") -> None:
        self.path = path
        self.reason = reason
        super().__init__(message)


class RunNotFoundError(NbdurableError):
    """The run id is not known to the store or runtime.

    Attributes:
        run_id: The run id that was looked up.
    """

    def __init__(self, run_id: str, message: str | None = None) -> None:
        self.run_id = run_id
        super().__init__(message or f"Run {run_id!r} not found.")


class DurableConflictError(NbdurableError):
    """A write conflicts with what is already stored or registered."""


class FencedOutError(DurableConflictError):
    """A write of a run by an owner that no longer holds its lease (its fencing token is stale)."""


class LeaseLostError(DurableConflictError):
    """The calling worker no longer holds the run's lease: another worker owns it now.

    Raised by ``ctx.ensure_owner()`` inside a tool, so a tool that checks right
    before its side effect does not act twice across a pause and a takeover.

    Attributes:
        run_id: The run.
    """

    def __init__(self, run_id: str, message: str | None = None) -> None:
        self.run_id = run_id
        super().__init__(
            message or f"run {run_id!r} is owned by another worker now; this call must not act"
        )


class ApprovalNotPendingError(DurableConflictError):
    """A verdict for an approval that no longer waits: another verdict won, or the run moved on.

    Attributes:
        run_id: The run.
        approval_id: The approval.
        verdict: The recorded verdict that won (``"approved"`` or ``"denied"``), or
            None when the run stopped waiting without one (cancelled, finished).
        state: The run's state when the verdict arrived.
    """

    def __init__(
        self,
        run_id: str,
        approval_id: str,
        *,
        verdict: str | None = None,
        state: str | None = None,
        message: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.approval_id = approval_id
        self.verdict = verdict
        self.state = state
        if message is None:
            if verdict is not None:
                message = f"approval {approval_id!r} of run {run_id!r} was already {verdict}"
            else:
                message = f"approval {approval_id!r} of run {run_id!r} no longer waits" + (
                    f" (the run is {state})" if state else ""
                )
        super().__init__(message)


class ApprovalExpiredError(NbdurableError):
    """An approval token is older than the maximum age: the request still waits.

    A process holding the secret signs a fresh token for the human's decision; a
    link or a token-only client must ask for a new link.

    Attributes:
        approval_id: The approval.
        age_ms: The token's age, when known.
        max_age_ms: The configured maximum age.
    """

    def __init__(
        self,
        approval_id: str,
        *,
        age_ms: int | None = None,
        max_age_ms: int | None = None,
        message: str | None = None,
    ) -> None:
        self.approval_id = approval_id
        self.age_ms = age_ms
        self.max_age_ms = max_age_ms
        super().__init__(
            message or f"approval token for {approval_id!r} expired; ask for a new link or token"
        )


class ApproverNotAllowedError(NbdurableError, PermissionError):
    """A verdict from a principal the agent does not allow to decide this call.

    Nothing was recorded: the request still waits for someone allowed.

    Attributes:
        run_id: The run.
        approval_id: The approval.
        tool_name: The tool the call is of.
        principal: Who tried to decide (for a link: whom it was addressed to; None: nobody named).
        allowed: The names allowed to decide (``Agent(approvers=...)``), or
            empty when the refusal is the submitter rule.
    """

    def __init__(
        self,
        run_id: str,
        approval_id: str,
        *,
        tool_name: str,
        principal: str | None,
        allowed: tuple[str, ...] = (),
        message: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.approval_id = approval_id
        self.tool_name = tool_name
        self.principal = principal
        self.allowed = allowed
        who = repr(principal) if principal is not None else "an unnamed principal"
        super().__init__(
            message
            or f"{who} may not decide approval {approval_id!r} ({tool_name}) of run {run_id!r}: "
            f"only {', '.join(allowed)} may; nothing was recorded and it still waits"
        )


class RunEndedError(NbdurableError):
    """A run or graph ended in a final state the waiter did not ask for.

    Attributes:
        run_id: The run (or graph) id.
        state: Its final state (``completed``, ``failed`` or ``cancelled``).
        reason: Why it ended that way, when known.
        wanted: The states the waiter asked for.
    """

    def __init__(
        self,
        run_id: str,
        state: str,
        *,
        reason: str | None = None,
        wanted: tuple[str, ...] = (),
        message: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.state = state
        self.reason = reason
        self.wanted = wanted
        detail = f" ({reason})" if reason else ""
        asked = f", not {' or '.join(wanted)}" if wanted else ""
        super().__init__(message or f"{run_id!r} ended {state}{detail}{asked}")


class WaitingForHumanError(NbdurableError):
    """A blocking wait stopped because the run waits for a human.

    ``Run.wait_sync`` and ``Run.result_sync`` raise it when the run reaches
    ``waiting_approval`` or ``needs_attention`` and those states were not asked
    for: a kernel handles one message at a time, so while a cell blocks, a click
    on an approval card is not delivered and the wait could never end. Decide
    (the card, ``%durable approve``, ``run.approve()``/``deny()``/``retry()``),
    then wait again.

    Attributes:
        run_id: The run.
        state: ``waiting_approval`` or ``needs_attention``.
        reason: Why it waits, when known.
        approval_ids: The approvals it waits for (empty for ``needs_attention``).
    """

    def __init__(
        self,
        run_id: str,
        state: str,
        *,
        reason: str | None = None,
        approval_ids: tuple[str, ...] = (),
    ) -> None:
        self.run_id = run_id
        self.state = state
        self.reason = reason
        self.approval_ids = approval_ids
        if state == "waiting_approval":
            which = f" ({', '.join(approval_ids)})" if approval_ids else ""
            todo = (
                f"approve or deny{which} (its card, `%durable approve {run_id}`, "
                "or run.approve()/run.deny())"
            )
        else:
            detail = f" ({reason})" if reason else ""
            todo = f"look at it{detail} and retry or deny (run.retry()/run.deny())"
        super().__init__(
            f"run {run_id!r} is {state}: a blocking wait cannot see a decision made while "
            f"it blocks; {todo}, then wait again"
        )


class LimitExceededError(NbdurableError):
    """A configured limit was exceeded.

    Attributes:
        limit: The name of the limit (for example ``"max_payload_bytes"``).
        value: The value that exceeded it.
        maximum: The configured maximum.
    """

    def __init__(self, limit: str, value: Any, maximum: Any, message: str | None = None) -> None:
        self.limit = limit
        self.value = value
        self.maximum = maximum
        super().__init__(message or f"{limit} exceeded: {value!r} > {maximum!r}.")


class ModelError(NbdurableError):
    """A model call failed.

    Attributes:
        retryable: Whether retrying the same request may succeed, when known.
    """

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        self.retryable = retryable
        super().__init__(message)


class ScriptExhaustedError(ModelError):
    """A ScriptedModel was called for a turn its script does not have."""


class OutputValidationError(ModelError):
    """The model's structured output did not validate against the requested ``output_type``.

    A model error like any other: the runtime's model retry may retry it.

    Attributes:
        output: The text the model produced.
    """

    def __init__(self, message: str, *, output: str = "") -> None:
        self.output = output
        super().__init__(message, retryable=True)


class ProviderError(ModelError):
    """A model provider refused or failed a request.

    Attributes:
        provider: ``"openai"``, ``"anthropic"``, ... (the adapter's name for it).
        status_code: The HTTP status, when there was a response.
        retryable: Whether the same request may succeed later.
    """

    default_retryable: bool | None = None

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status_code: int | None = None,
        retryable: bool | None = None,
    ) -> None:
        self.provider = provider
        self.status_code = status_code
        super().__init__(
            message, retryable=self.default_retryable if retryable is None else retryable
        )


class RateLimitError(ProviderError):
    """429: too many requests or tokens for now; a later retry may succeed."""

    default_retryable = True


class ProviderUnavailableError(ProviderError):
    """The provider is overloaded or failed (5xx, Anthropic's 529); a later retry may succeed."""

    default_retryable = True


class ProviderTimeoutError(ProviderError):
    """No answer in time, or the connection failed; a retry may succeed."""

    default_retryable = True


class InvalidRequestError(ProviderError):
    """The request itself is wrong (400, 404, 413, 422): retrying it cannot help."""

    default_retryable = False


class AuthenticationError(ProviderError):
    """The API key is missing, wrong or not allowed (401, 403): retrying cannot help."""

    default_retryable = False
