"""Compact column values of the SQLite store (schema version 5 and later).

JSON text columns (event payloads, message nodes, a checkpoint's ``usage`` and
``extra``) hold either the JSON as TEXT, as every version wrote it, or a BLOB:
one byte naming a preset dictionary, then the UTF-8 JSON compressed with raw
deflate primed with that dictionary. Short values whose packing would not save
bytes stay TEXT, so a reader tells the two apart by the value's SQL type and
reads files of either version the same way.

An event's ``type`` is a one-byte BLOB for the event types below (TEXT for any
other), its ``attempt_id`` a 16-byte BLOB when it is 32 lowercase hex digits,
and its ``operation_id`` an empty BLOB when it is the loop's usual
``"{run_id}:model:{step_index}"``.

The dictionaries and the type codes are part of the file format: they never
change. A new dictionary or code gets a new number (and a schema version, so
that older releases refuse files they could not read).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from .._errors import StoreCorruptionError

__all__ = [
    "DICTIONARIES",
    "EVENTS_DICTIONARY",
    "MESSAGES_DICTIONARY",
    "EVENT_TYPES",
    "EVENT_TYPE_CODES",
    "pack_attempt",
    "pack_json",
    "pack_operation",
    "pack_type",
    "unpack_attempt",
    "unpack_json",
    "unpack_json_many",
    "unpack_operation",
    "unpack_type",
    "usual_operation",
]

EVENT_TYPES: Final = (
    "run_started",
    "step_start",
    "model_attempt_started",
    "model_delta",
    "model_attempt_failed",
    "model_completed",
    "tool_call",
    "tool_approval_request",
    "approval_resolved",
    "tool_result",
    "step_finish",
    "checkpoint_saved",
    "run_suspended",
    "run_finished",
    "run_error",
    "run_state",
    "run_forked",
    "run_taken_over",
    "grant_added",
    "grant_revoked",
)
"""Event type codes: ``EVENT_TYPES[code]``. Any other type is stored as its text;
giving a new type a code changes the format (a release that does not know the
code would refuse the row), so it needs a schema version of its own."""

EVENT_TYPE_CODES: Final[Mapping[str, int]] = MappingProxyType(
    {name: code for code, name in enumerate(EVENT_TYPES)}
)
"""Each coded event type's code (the inverse of :data:`EVENT_TYPES`)."""
_TYPE_CODES = {name: bytes([code]) for name, code in EVENT_TYPE_CODES.items()}

# Dictionaries: the strings JSON of each kind repeats, most frequent last (deflate
# reaches the end of its dictionary with the shortest distances).
_EVENTS = (
    b'{"error_type":"","message":"","failure_kind":"model","retryable":true,"attempt":1,'
    b'"previous_owner":"","owner":"","cause":"lease_expired","tool_calls":[],'
    b'"grant_id":"","tool":"","expires_at":null,"match":{},"agent_path":[],"granted_by":"",'
    b'"revoked_by":"","parent_run_id":"","edited":false,'
    b'{"state":"waiting_approval","reason":null,"next_attempt_at":null}'
    b'{"approval_id":"","tool_call_id":"call_","tool_name":"","args":{},"token":"v1.",'
    b'"source":{"by":"","authenticated":false,"via":"widget","addressed_to":null,'
    b'"grant_id":null},"approved":true}'
    b'{"stats":{"started_at":1800000000000,"model_ms":1,"tool_ms":1,"tool_calls":[""]}}'
    b'{"step_index":0,"usage":{"input_tokens":0,"output_tokens":0,"total_tokens":0,'
    b'"cached_input_tokens":null,"cost":null},"finish_reason":"stop","text":"",'
    b'"state":"completed"}'
    b'{"resumed":false,"next_step_index":0}'
    b'{"type":"text_delta","turn":0,"delta":" the'
    b'{"step_id":"#1","status":"running"}'
    b'{"step_index":1,"result":{"type":"tool_result","tool_call_id":"call_","tool_name":"",'
    b'"result":"","is_error":false}}'
    b'{"step_index":1,"tool_call":{"type":"tool_call","tool_call_id":"call_","tool_name":"",'
    b'"args":{}}}'
    b'{"response":{"content":[{"type":"text","text":""},{"type":"tool_call",'
    b'"tool_call_id":"call_","tool_name":"","args":{}}],"usage":{"input_tokens":10,'
    b'"output_tokens":5,"total_tokens":15,"cached_input_tokens":null,"cost":null},'
    b'"finish_reason":"tool_calls","model_id":""}}'
    b'{"step_index":1,"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15,'
    b'"cached_input_tokens":null,"cost":null},"finish_reason":"tool_calls"}'
)
_MESSAGES = (
    b'{"type":"image","data":"","media_type":"image/png"}'
    b'{"type":"tool_approval_request","approval_id":"","tool_call_id":"call_",'
    b'"tool_name":"","args":{},"token":"v1."}'
    b'{"role":"system","content":[{"type":"text","text":""}],"metadata":null}'
    b'{"role":"user","content":[{"type":"text","text":""}],"metadata":null}'
    b'{"role":"assistant","content":[{"type":"text","text":""}],"metadata":null}'
    b'{"role":"assistant","content":[{"type":"tool_call","tool_call_id":"call_",'
    b'"tool_name":"","args":{}}],"metadata":null}'
    b'{"role":"tool","content":[{"type":"tool_result","tool_call_id":"call_",'
    b'"tool_name":"","result":"","is_error":false}],"metadata":null}'
)

EVENTS_DICTIONARY: Final = 1
"""Codec byte of JSON packed with the events dictionary (payloads, checkpoint metadata)."""
MESSAGES_DICTIONARY: Final = 2
"""Codec byte of JSON packed with the messages dictionary (message nodes)."""
DICTIONARIES: Final[Mapping[int, bytes]] = MappingProxyType(
    {EVENTS_DICTIONARY: _EVENTS, MESSAGES_DICTIONARY: _MESSAGES}
)
"""The preset dictionaries by codec byte (part of the file format: never changed)."""
_HEADERS = {kind: bytes([kind]) for kind in DICTIONARIES}

# Small values are packed by copying a compressor primed with the dictionary:
# much cheaper than priming a new one, and cheaper the smaller its state (a 2 KB
# window still holds the whole dictionary). Larger values get a full window;
# the one inflater reads both.
_SMALL = 2048
_WBITS = -15
_PRIMED = {
    kind: zlib.compressobj(9, zlib.DEFLATED, -11, 2, zlib.Z_DEFAULT_STRATEGY, zdict)
    for kind, zdict in DICTIONARIES.items()
}
_MIN_PACKED = 12
"""Shorter JSON stays text: a dozen bytes is about what packing costs by itself."""

_HEX32 = re.compile(r"[0-9a-f]{32}")


def pack_json(text: str, kind: int = EVENTS_DICTIONARY) -> str | bytes:
    """``text`` packed with dictionary ``kind`` when that is shorter, else ``text``."""
    if len(text) < _MIN_PACKED:
        return text
    try:
        raw = text.encode()
    except UnicodeEncodeError:  # a lone surrogate: leave it to the driver, as before
        return text
    if len(raw) <= _SMALL:
        compressor = _PRIMED[kind].copy()
    else:
        compressor = zlib.compressobj(
            6, zlib.DEFLATED, _WBITS, 8, zlib.Z_DEFAULT_STRATEGY, DICTIONARIES[kind]
        )
    packed = _HEADERS[kind] + compressor.compress(raw) + compressor.flush()
    return packed if len(packed) < len(raw) else text


def unpack_json(value: object) -> str:
    """The JSON text of a stored value (TEXT as is, a packed BLOB inflated).

    Raises:
        StoreCorruptionError: The value is neither text nor a packed value that inflates.
    """
    if isinstance(value, str):
        return value
    if not isinstance(value, bytes) or not value:
        raise StoreCorruptionError(f"a stored JSON value is a {type(value).__name__}")
    zdict = DICTIONARIES.get(value[0])
    if zdict is None:
        raise StoreCorruptionError(f"a stored JSON value has an unknown codec ({value[0]})")
    try:
        inflater = zlib.decompressobj(_WBITS, zdict)
        raw = inflater.decompress(value[1:])
        if not inflater.eof or inflater.unused_data:
            raise StoreCorruptionError("a packed JSON value is truncated or has trailing bytes")
        return raw.decode()
    except (zlib.error, UnicodeDecodeError) as exc:
        raise StoreCorruptionError(f"a packed JSON value does not inflate: {exc}") from exc


def unpack_json_many(values: Iterable[object]) -> list[str]:
    """:func:`unpack_json` of each value, None as ``"null"``: one loop, no call per value.

    A history listing inflates two values per checkpoint (1,000 for a 500-step
    run); the call and its type tests cost a fifth of the inflation.

    Raises:
        StoreCorruptionError: A value does not unpack (as :func:`unpack_json` says).
    """
    texts: list[str] = []
    add = texts.append
    inflater = zlib.decompressobj
    zdicts = dict(DICTIONARIES)  # a dict's get, not the read-only proxy's
    for value in values:
        if type(value) is bytes and value and (zdict := zdicts.get(value[0])) is not None:
            try:
                inflating = inflater(_WBITS, zdict)
                raw = inflating.decompress(value[1:])
                if inflating.eof and not inflating.unused_data:
                    add(raw.decode())
                    continue
            except (zlib.error, UnicodeDecodeError):
                pass
        add("null" if value is None else unpack_json(value))  # text, or the error it is
    return texts


def pack_type(event_type: str) -> str | bytes:
    """An event type's stored value: its one-byte code, or the text of an unknown type."""
    return _TYPE_CODES.get(event_type, event_type)


def unpack_type(value: object) -> str:
    """The event type of a stored value.

    Raises:
        StoreCorruptionError: The value is not a known code or text.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bytes) and len(value) == 1 and value[0] < len(EVENT_TYPES):
        return EVENT_TYPES[value[0]]
    raise StoreCorruptionError(f"a stored event type is not one: {value!r}")


def pack_attempt(attempt_id: str | None) -> str | bytes | None:
    """An attempt id as stored: 16 bytes for 32 lowercase hex digits, else as is."""
    if attempt_id is not None and len(attempt_id) == 32 and _HEX32.fullmatch(attempt_id):
        return bytes.fromhex(attempt_id)
    return attempt_id


def unpack_attempt(value: object) -> str | None:
    """The attempt id of a stored value.

    Raises:
        StoreCorruptionError: The value is a BLOB of the wrong size, or of another type.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes) and len(value) == 16:
        return value.hex()
    raise StoreCorruptionError(f"a stored attempt id is not one: {value!r}")


def usual_operation(run_id: str, step_index: int | None) -> str:
    """The loop's operation id of a step's model call, which the store writes shortest."""
    return f"{run_id}:model:{step_index}"


def pack_operation(
    operation_id: str | None, run_id: str, step_index: int | None
) -> str | bytes | None:
    """An operation id as stored: an empty BLOB for the loop's usual id, else as is."""
    if step_index is not None and operation_id == usual_operation(run_id, step_index):
        return b""
    return operation_id


def unpack_operation(value: object, run_id: str, step_index: int | None) -> str | None:
    """The operation id of a stored value.

    Raises:
        StoreCorruptionError: The value is not text, NULL or the empty BLOB of a step's event.
    """
    if value is None or isinstance(value, str):
        return value
    if value == b"" and step_index is not None:
        return usual_operation(run_id, step_index)
    raise StoreCorruptionError(f"a stored operation id is not one: {value!r}")
