"""The SQLite store's rows as stored: message nodes, checkpoints, events of version 5.

The packing itself (preset-dictionary deflate, type codes, raw attempt ids) is in
:mod:`._codec`; this module applies it to whole rows, and reads events back.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Sequence
from typing import Any

from pydantic_core import PydanticSerializationError, to_json

from ...events._model import Event
from .._chain import NodeRow
from .._packing import (
    MESSAGES_DICTIONARY,
    pack_json,
    unpack_attempt,
    unpack_json,
    unpack_operation,
    unpack_type,
)
from .._rows import COLUMNS, CheckpointRow

__all__ = ["checkpoint_values", "compact_json", "event_from_row", "node_rows"]

# One encoder for every event: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# The C encoder that _ENCODER.encode builds at each call, built once: the same
# text without the Python layers around it. Without cycle markers (a payload is
# a JSON tree; a cyclic one fails with RecursionError instead of ValueError).
_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_c_encode: Any = (
    None
    if _C_ENCODER is None
    else _C_ENCODER(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, True
    )
)


def compact_json(value: object) -> str:
    """``value`` (a JSON tree) as compact JSON text, non-ASCII characters as they are.

    The text of ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``,
    but for how floats spell their exponent (``1.5e-7``); both read back the same.
    pydantic-core's serializer writes it, three times as fast as the json
    module's C encoder; what it refuses (a lone surrogate, a cycle) is left to
    the json module, which writes it or raises as ``json.dumps`` does.
    """
    try:
        return to_json(value).decode()
    except (PydanticSerializationError, ValueError):
        pass
    if _c_encode is None:
        return _ENCODER.encode(value)
    return "".join(_c_encode(value, 0))


def event_from_row(run_id: str, row: tuple[object, ...]) -> Event:
    """The event in an ``events`` row (one per event, as schema version 5 and before wrote them).

    ``row`` is read from its position on. Version 6 writes batches instead
    (:mod:`._events`).
    """
    position, type_, step_index, operation_id, attempt_id, payload, created_at = row
    return Event(
        run_id=run_id,
        offset=position,
        type=unpack_type(type_),
        step_index=step_index,
        operation_id=unpack_operation(operation_id, run_id, step_index),  # type: ignore[arg-type]
        attempt_id=unpack_attempt(attempt_id),
        payload=json.loads(unpack_json(payload)),
        created_at=created_at,
    )


def node_rows(rows: Sequence[NodeRow]) -> list[tuple[object, ...]]:
    """Node rows as stored: the message JSON packed (its id hashes the JSON text)."""
    return [(nid, parent, pack_json(text, MESSAGES_DICTIONARY)) for nid, parent, text in rows]


_USAGE = COLUMNS.index("usage")
_EXTRA = COLUMNS.index("extra")


def checkpoint_values(row: CheckpointRow) -> list[object]:
    """A checkpoint row's metadata values as stored: usage and extra packed."""
    values: list[object] = list(row.values())
    if isinstance(row.usage, str):
        values[_USAGE] = pack_json(row.usage)
    if isinstance(row.extra, str):
        values[_EXTRA] = pack_json(row.extra)
    return values
