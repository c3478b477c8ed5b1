"""How a leg of a run ends, and what that writes into the run record.

Both engines run a leg of the same step machine and end it the same ways: the
embedded engine (:mod:`nbdurable.runtime._engine`) and the Temporal workflow
(:mod:`nbdurable.temporal._workflow`) turn what the leg returned or raised into
a :class:`LegOutcome`, and :func:`record_changes` into the run record's
changes. Code deep inside a leg that decides the run's fate raises a
:class:`LegEnded` carrying the outcome; the engine that catches it writes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .._errors import LimitExceededError
from ..loop._options import GenerateTextResult
from ..runs import RunPatch
from ._limits import ModelRetry

__all__ = [
    "CLIENT_TOOL_REASON",
    "LegEnded",
    "LegFailed",
    "LegOutcome",
    "ModelAttemptFailed",
    "NeedsAttention",
    "OutcomeKind",
    "RunTimedOut",
    "after_model_error",
    "ended_by",
    "leg_result",
    "record_changes",
]

OutcomeKind = Literal[
    "completed",
    "waiting_approval",
    "waiting_client_tool",
    "needs_attention",
    "retry_wait",
    "failed",
    "cancelled",
    "released",
    "superseded",
]

CLIENT_TOOL_REASON = "the run waits for a client tool's result"
"""The reason of a run whose leg stopped at a client tool's call."""

_STATES: dict[OutcomeKind, str | None] = {
    "completed": "completed",
    "waiting_approval": "waiting_approval",
    "waiting_client_tool": "needs_attention",
    "needs_attention": "needs_attention",
    "retry_wait": "retry_wait",
    "failed": "failed",
    "cancelled": "cancelled",
    "released": "pending",
    "superseded": None,
}


@dataclass(frozen=True)
class LegOutcome:
    """How a leg ended. Build one with the class methods, not the constructor.

    Attributes:
        kind: What happened.
        reason: Why the run is failed, cancelled or needs attention.
        error: The error behind a failure or a retry, ``"<type>: <message>"``.
        result_text: The final text of a completed run.
        next_attempt_at: When a ``retry_wait`` run is eligible again (epoch ms).
    """

    kind: OutcomeKind
    reason: str | None = None
    error: str | None = None
    result_text: str | None = None
    next_attempt_at: int | None = None

    @classmethod
    def completed(cls, result_text: str | None) -> LegOutcome:
        """The run completed with ``result_text``."""
        return cls("completed", result_text=result_text)

    @classmethod
    def waiting_approval(cls) -> LegOutcome:
        """The leg stopped at gated calls: the run waits for verdicts."""
        return cls("waiting_approval")

    @classmethod
    def waiting_client_tool(cls) -> LegOutcome:
        """The leg stopped at a client tool's call: the run waits for its result."""
        return cls("waiting_client_tool", reason=CLIENT_TOOL_REASON)

    @classmethod
    def needs_attention(cls, reason: str) -> LegOutcome:
        """A human decides how the run goes on (an interrupted ``manual`` tool)."""
        return cls("needs_attention", reason=reason)

    @classmethod
    def retry_wait(cls, error: str, next_attempt_at: int) -> LegOutcome:
        """A model attempt failed; the run's policy tries again at ``next_attempt_at``."""
        return cls("retry_wait", error=error, next_attempt_at=next_attempt_at)

    @classmethod
    def failed(cls, reason: str, error: str | None = None) -> LegOutcome:
        """The run failed for ``reason`` (``error``: what went wrong, when known)."""
        return cls("failed", reason=reason, error=error)

    @classmethod
    def timed_out(cls) -> LegOutcome:
        """The run's deadline passed: it failed, reason ``timeout``."""
        return cls("failed", reason="timeout")

    @classmethod
    def cancelled(cls) -> LegOutcome:
        """The run was cancelled."""
        return cls("cancelled", reason="cancelled")

    @classmethod
    def released(cls) -> LegOutcome:
        """The owner shut down mid-leg: the run is pending again, for the next owner."""
        return cls("released")

    @classmethod
    def superseded(cls) -> LegOutcome:
        """Another owner took the run over: it decides, nothing is written here."""
        return cls("superseded")

    @property
    def state(self) -> str | None:
        """The run state the outcome leaves; None when it writes nothing."""
        return _STATES[self.kind]


def record_changes(outcome: LegOutcome) -> RunPatch:
    """The run record's changes for ``outcome`` (empty: nothing to write).

    The leg's verdicts are used up when it gets past its gated calls (completed
    or stopped again); a completed run's attempt count and last error are reset.
    Lease fields are the engine's to clear.
    """
    match outcome.kind:
        case "completed":
            return RunPatch(
                state="completed",
                result_text=outcome.result_text,
                verdicts={},
                rerun_tool_calls=[],
                model_attempts=0,
                error=None,
            )
        case "waiting_approval":
            return RunPatch(state="waiting_approval", verdicts={}, rerun_tool_calls=[])
        case "waiting_client_tool":
            return RunPatch(state="needs_attention", verdicts={}, reason=outcome.reason)
        case "retry_wait":
            return RunPatch(
                state="retry_wait", error=outcome.error, next_attempt_at=outcome.next_attempt_at
            )
        case "failed":
            error = RunPatch() if outcome.error is None else RunPatch(error=outcome.error)
            return RunPatch(state="failed", reason=outcome.reason) | error
        case "needs_attention" | "cancelled":
            return RunPatch(state=outcome.kind, reason=outcome.reason)
        case "released":
            return RunPatch(state="pending")
        case "superseded":
            return RunPatch()


def leg_result(result: GenerateTextResult) -> LegOutcome:
    """The outcome of a leg the loop returned from: completed, or stopped for a verdict or a result.

    A leg stops at gated calls (it waits for their verdicts) or at a client
    tool's call (it waits for that tool's result).
    """
    if result.status == "completed":
        return LegOutcome.completed(result.text)
    if result.pending_approvals:
        return LegOutcome.waiting_approval()
    return LegOutcome.waiting_client_tool()


def after_model_error(
    error: BaseException,
    *,
    policy: ModelRetry | None,
    retry_if: Callable[[BaseException], bool] | None,
    used: int,
    now: int,
) -> LegOutcome:
    """What a failed model attempt means for the run: a retry later, or a failure.

    Args:
        error: What the attempt raised.
        policy: The run's saved retry policy (None: model errors are final).
        retry_if: The agent's narrowing of the policy.
        used: Attempts used so far (the record's count: a lost worker's attempt counts).
        now: The current time, epoch ms.
    """
    text = f"{type(error).__name__}: {error}"
    if policy is None or (retry_if is not None and not retry_if(error)):
        return LegOutcome.failed("model_error", text)
    if used >= policy.max_attempts:
        return LegOutcome.failed("model_retries_exhausted", text)
    return LegOutcome.retry_wait(text, now + policy.delay_ms(used))


class LegEnded(Exception):
    """Raised inside a leg to end it with ``outcome`` (the engine catching it writes it).

    Args:
        outcome: How the leg ends.
        message: The exception's message.
    """

    def __init__(self, outcome: LegOutcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


class NeedsAttention(LegEnded):
    """A ``manual`` tool was interrupted mid-call: a human decides (retry or deny)."""

    def __init__(self, reason: str) -> None:
        super().__init__(LegOutcome.needs_attention(reason), reason)


class RunTimedOut(LegEnded):
    """The run's deadline passed."""

    def __init__(self, message: str = "the run's timeout passed") -> None:
        super().__init__(LegOutcome.timed_out(), message)


class LegFailed(LegEnded):
    """The leg ends the run ``failed`` with ``reason`` (a model error, a limit, the timeout)."""

    def __init__(self, reason: str, error: str) -> None:
        super().__init__(LegOutcome.failed(reason, error), error)
        self.reason = reason
        self.error = error


class ModelAttemptFailed(Exception):
    """An error raised within a model attempt (what model retry retries).

    Not a :class:`LegEnded`: the run's policy decides the outcome
    (:func:`after_model_error`).
    """

    def __init__(self, error: BaseException) -> None:
        self.error = error
        super().__init__(f"{type(error).__name__}: {error}")


def ended_by(exc: BaseException) -> LegOutcome | None:
    """The outcome an exception out of a leg decides; None for any other error."""
    if isinstance(exc, LegEnded):
        return exc.outcome
    if isinstance(exc, LimitExceededError):
        return LegOutcome.failed("limit_exceeded", str(exc))
    return None
