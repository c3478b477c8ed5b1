"""The durability primitive: checkpoints, their codec, the store seam and the approval signer.

Beside them, the store seam (:mod:`.store`: checkpoints, run records, event log;
the records and their rules are :mod:`nbdurable.runs`, in this layer too).

Standard library and pydantic only: no file or database code lives here.
"""

from ._checkpoint import (
    CHECKPOINT_VERSION,
    AgentCheckpoint,
    CheckpointInfo,
    CheckpointStatus,
    ForkPoint,
    StepStats,
)
from ._codec import deserialize_checkpoint, serialize_checkpoint
from ._definitions import parts_of
from ._records import RunRecord
from ._signer import SECRET_ENV_VAR, TOKEN_DENIAL_REASON, ApprovalSigner
from .store import (
    HISTORY,
    INCREMENTAL,
    MULTIPROCESS,
    PERSISTENT,
    VERSIONED_SCHEMA,
    Capability,
    DurableSession,
    EventLog,
    HistoryStore,
    RunStore,
    SessionStore,
    maybe_await,
    supports,
)

__all__ = [
    "CHECKPOINT_VERSION",
    "HISTORY",
    "INCREMENTAL",
    "MULTIPROCESS",
    "PERSISTENT",
    "SECRET_ENV_VAR",
    "VERSIONED_SCHEMA",
    "TOKEN_DENIAL_REASON",
    "AgentCheckpoint",
    "ApprovalSigner",
    "CheckpointInfo",
    "CheckpointStatus",
    "Capability",
    "DurableSession",
    "EventLog",
    "ForkPoint",
    "HistoryStore",
    "RunStore",
    "RunRecord",
    "SessionStore",
    "StepStats",
    "deserialize_checkpoint",
    "maybe_await",
    "parts_of",
    "serialize_checkpoint",
    "supports",
]
