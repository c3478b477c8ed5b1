"""JSON codec for checkpoints: bytes-safe and version-gated."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from .._errors import CheckpointVersionError, StoreCorruptionError
from ._checkpoint import CHECKPOINT_VERSION, AgentCheckpoint
from ._stored import validate_stored

__all__ = ["deserialize_checkpoint", "serialize_checkpoint"]


def serialize_checkpoint(checkpoint: AgentCheckpoint) -> str:
    """Encode a checkpoint as JSON text; image bytes are stored as base64."""
    return checkpoint.model_dump_json()


def deserialize_checkpoint(data: str | bytes) -> AgentCheckpoint:
    """Decode JSON text written by :func:`serialize_checkpoint`.

    Raises:
        CheckpointVersionError: The data carries a version this nbdurable cannot read.
        StoreCorruptionError: The data is not a checkpoint.
    """
    try:
        raw: Any = json.loads(data)
    except (ValueError, TypeError) as exc:
        raise StoreCorruptionError(f"checkpoint is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise StoreCorruptionError("checkpoint JSON is not an object")
    version = raw.get("version")
    if version != CHECKPOINT_VERSION or isinstance(version, bool):
        raise CheckpointVersionError(version, CHECKPOINT_VERSION)
    try:
        return validate_stored(AgentCheckpoint, data)
    except ValidationError as exc:
        raise StoreCorruptionError(f"checkpoint does not match the schema: {exc}") from exc
