"""The durability primitive: checkpoints, their codec, the store seam and the approval signer.

Standard library and pydantic only: no file or database code lives here.
"""

from .checkpoint import CHECKPOINT_VERSION, AgentCheckpoint, CheckpointInfo, CheckpointStatus
from .codec import deserialize_checkpoint, serialize_checkpoint
from .signer import SECRET_ENV_VAR, TOKEN_DENIAL_REASON, ApprovalSigner
from .store import DurableSession, SessionStore, maybe_await

__all__ = [
    "CHECKPOINT_VERSION",
    "SECRET_ENV_VAR",
    "TOKEN_DENIAL_REASON",
    "AgentCheckpoint",
    "ApprovalSigner",
    "CheckpointInfo",
    "CheckpointStatus",
    "DurableSession",
    "SessionStore",
    "deserialize_checkpoint",
    "maybe_await",
    "serialize_checkpoint",
]
