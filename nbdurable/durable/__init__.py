"""The durability primitive: checkpoints, their codec, the store seam and the approval signer.

Beside them, what every layer above reads and the stores write: the runtime's run
records and run states (:mod:`.runtime_run`, :mod:`.run_states`), the store seam
(:mod:`.store`: checkpoints, run records, event log), the pure rules a store
applies when it schedules (:mod:`.scheduling`, :mod:`.verdicts`,
:mod:`.graph_status`), lease holders (:mod:`.lease_holder`) and the fork core
(:mod:`.fork`).

Standard library and pydantic only: no file or database code lives here.
"""

from .checkpoint import (
    CHECKPOINT_VERSION,
    AgentCheckpoint,
    CheckpointInfo,
    CheckpointStatus,
    ForkPoint,
    StepStats,
)
from .codec import deserialize_checkpoint, serialize_checkpoint
from .records import RunRecord
from .signer import SECRET_ENV_VAR, TOKEN_DENIAL_REASON, ApprovalSigner
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
    "serialize_checkpoint",
    "supports",
]
