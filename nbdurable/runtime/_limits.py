"""Runtime limits and the model retry policy, validated eagerly."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from .._errors import ConfigurationError, LimitExceededError

__all__ = [
    "DEFAULT_MAX_CONCURRENT_RUNS",
    "Limits",
    "ModelRetry",
    "check_concurrency",
    "is_retryable",
    "payload_bytes",
]

DEFAULT_MAX_CONCURRENT_RUNS = 100
"""Agent runs a runtime executes at once unless told otherwise (docs/runtime.md says why).

An agent run spends nearly all its time waiting on its model (or a tool's
I/O): on the issue-42 benchmark a step costs the runtime a few milliseconds
of CPU against a model turn of 50 ms to many seconds, so a hundred runs in
flight use a fraction of one core, and a notebook user who submits 50 runs
sees them all start. The cap is for what does not scale with waiting: memory
(each executing run holds its history) and a provider's rate limit.
"""


class _PositiveInts(BaseModel):
    """Frozen positive-integer settings; a bad one is a ``ConfigurationError`` naming ``_what``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    _what: ClassVar[str]

    @field_validator("*", mode="before")
    @classmethod
    def _positive(cls, value: Any, info: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{info.field_name} must be a positive integer, not {value!r}")
        return value

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigurationError(f"invalid {self._what}: {exc.errors()[0]['msg']}") from None


class Limits(_PositiveInts):
    """Admission, payload and operation limits of a runtime.

    Attributes:
        max_pending_runs: Unfinished runs the store may hold before ``submit`` refuses.
        max_pending_tasks: Unfinished custom tasks before submission refuses.
        max_payload_bytes: Largest persisted payload (a prompt, a checkpoint, one
            delta), in UTF-8 bytes of its JSON.
        max_operations: Model calls plus tool calls of one run, across legs.
    """

    _what = "limits"

    max_pending_runs: int = 10_000
    max_pending_tasks: int = 10_000
    max_payload_bytes: int = 1_048_576
    max_operations: int = 10_000

    def check_payload(self, size: int) -> None:
        """Refuse a persisted payload of ``size`` bytes (:func:`payload_bytes`) over the limit.

        Raises:
            LimitExceededError: ``size`` is over ``max_payload_bytes``.
        """
        if size > self.max_payload_bytes:
            raise LimitExceededError("max_payload_bytes", size, self.max_payload_bytes)


def is_retryable(error: BaseException) -> bool:
    """Whether a retry of the model call may help, by the error's classification.

    A ready-made ``Agent(retry_if=...)``: provider errors that say a retry cannot
    help (a bad request, a wrong key) are False; rate limits, overloads,
    timeouts, invalid structured output and unclassified errors are True.
    """
    return getattr(error, "retryable", None) is not False


class ModelRetry(_PositiveInts):
    """Persisted retry of model errors: opt-in per registration.

    Every error raised inside a model attempt counts (no transient-error
    classifier, no jitter). The first request counts toward ``max_attempts``.
    The delay before retry ``n`` (1-based) is ``initial_delay_ms * 2 ** (n - 1)``,
    capped at ``max_delay_ms``.
    """

    _what = "model_retry"

    max_attempts: int = 3
    initial_delay_ms: int = 1000
    max_delay_ms: int = 30_000

    @model_validator(mode="after")
    def _ordered(self) -> ModelRetry:
        if self.max_delay_ms < self.initial_delay_ms:
            raise ValueError("max_delay_ms must be >= initial_delay_ms")
        return self

    def delay_ms(self, retry: int) -> int:
        """Milliseconds to wait before retry number ``retry`` (1 = the first retry)."""
        return int(min(self.initial_delay_ms * 2 ** max(retry - 1, 0), self.max_delay_ms))


def check_concurrency(name: str, value: Any) -> int:
    """Validate ``max_concurrent_runs``/``max_concurrent_tasks``: an integer from 1 to 1000."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise ConfigurationError(f"{name} must be an integer from 1 to 1000, not {value!r}")
    return value


def check_retry_ms(value: Any) -> int:
    """Validate ``store_retry_ms``: an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"store_retry_ms must be an integer >= 0, not {value!r}")
    return value


def check_max_age_ms(value: Any) -> int | None:
    """Validate ``approval_max_age_ms``: a positive integer or None."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ConfigurationError(
            f"approval_max_age_ms must be a positive integer or None, not {value!r}"
        )
    return value


def payload_bytes(json_text: str) -> int:
    """Size of a persisted payload: UTF-8 bytes of its JSON."""
    return len(json_text.encode("utf-8"))
