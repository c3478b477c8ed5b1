"""Every exception nbdurable raises, in one tree.

```
NbdurableError                     root: catch this to catch everything of ours
├── ConfigurationError (ValueError) invalid options, tools, scripts or registrations
├── CheckpointNotFoundError        resume of a run id the store does not know
├── CheckpointVersionError         a checkpoint or store schema written by a newer version
├── StoreCorruptionError           stored bytes that do not decode as a checkpoint
├── RunNotFoundError               an unknown run id outside of resume
├── DurableConflictError           a write that conflicts with what is stored
│   └── FencedOutError             a run's former owner writing after losing its lease
├── LimitExceededError             a configured limit was hit
└── ModelError                     a model call failed
    └── ScriptExhaustedError       a ScriptedModel was asked for more turns than it has
```

Inside a run, bad tool input, unknown tools and tool exceptions never raise:
they become ``is_error`` tool results the model can react to.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CheckpointNotFoundError",
    "CheckpointVersionError",
    "ConfigurationError",
    "DurableConflictError",
    "FencedOutError",
    "LimitExceededError",
    "ModelError",
    "NbdurableError",
    "RunNotFoundError",
    "ScriptExhaustedError",
    "StoreCorruptionError",
]


class NbdurableError(Exception):
    """Root of every error nbdurable raises."""


class ConfigurationError(NbdurableError, ValueError):
    """Invalid options, tool definitions, scripts or registrations."""


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
    """

    def __init__(
        self, message: str, *, run_id: str | None = None, step_index: int | None = None
    ) -> None:
        self.run_id = run_id
        self.step_index = step_index
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
