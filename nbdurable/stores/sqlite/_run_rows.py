"""Rows of the runtime tables read back: each checked against its checksum, then decoded.

A damaged row is a :class:`StoreCorruptionError` naming the run, never a record
or intent that says something else than what was written. The SQLite run
records (:mod:`._runs`) read every row through here.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ..._errors import StoreCorruptionError
from ...durable._stored import validate_stored
from ...runs import RuntimeRun, ToolIntent
from .._trusted import built
from ._crc import CHECKSUMMED, verify_row

__all__ = [
    "RT_COLUMNS",
    "decode_intent",
    "decode_record",
    "queried_columns",
    "remember",
    "same_count",
    "update_sql",
    "verified_intents",
    "verified_record",
]


RT_COLUMNS = (*CHECKSUMMED["rt_runs"], "crc")
"""The columns of an ``rt_runs`` row as the store reads and writes them, in order."""


def queried_columns(run: RuntimeRun) -> tuple[object, ...]:
    """The queried columns of ``run``'s row after its id, as ``runtime_row`` orders them."""
    return (run.seq, run.session_id, run.state, run.request_id, run.fence, run.kind, run.graph_id)


_UPDATES: dict[tuple[int, ...], str] = {}


def update_sql(changed: tuple[int, ...]) -> str:
    """The UPDATE of the columns at ``changed`` (positions in :data:`RT_COLUMNS`), record, crc."""
    found = _UPDATES.get(changed)
    if found is None:
        named = [f"{RT_COLUMNS[i]} = ?" for i in changed] + ["record = ?", "crc = ?"]
        found = _UPDATES[changed] = f"UPDATE rt_runs SET {', '.join(named)} WHERE run_id = ?"
    return found


def verified_record(
    row: Sequence[Any], legacy: bool, column: int | None = None, wanted: object = None
) -> RuntimeRun:
    """The record of an ``rt_runs`` row read with :data:`_RT`, its checksum verified.

    With ``column``, the row's value there must be ``wanted`` (what the query
    asked for: a damaged index can lead to another row).
    """
    run_id = str(row[0])
    if column is not None and row[column] != wanted:
        verify_row("rt_runs", row[:-1], row[-1], run_id, "the run record", legacy)
        raise StoreCorruptionError(
            f"an index of rt_runs leads to the record of run {run_id!r} for {wanted!r}",
            run_id=run_id,
        )
    key = (run_id, legacy)
    seen = VERIFIED.get(key)
    if seen is not None and seen[0] == row:
        return seen[1]  # the same bytes as a row verified before: the same record
    verify_row("rt_runs", row[:-1], row[-1], run_id, "the run record", legacy)
    record = decode_record(row[-2])
    if len(VERIFIED) >= VERIFIED_MAX:
        VERIFIED.clear()
    VERIFIED[key] = (tuple(row), record)
    return record


VERIFIED: dict[tuple[str, bool], tuple[tuple[Any, ...], RuntimeRun]] = {}
"""Rows verified lately, by run: a row read again unchanged is not checked and decoded again.

A claim reads the head of every unfinished session, and a runtime executing 200
runs claims, lists and reads them again and again: checking each row's checksum
and decoding its record every time cost more than the runs' own steps (issue 42).
A row equal, byte for byte, to one verified before (its checksum included) is
the same record (records are immutable), whatever file it comes from; any other
row, a damaged one included, is verified as before.
"""
VERIFIED_MAX = 8192


def remember(row: tuple[Any, ...], run: RuntimeRun, before: RuntimeRun | None) -> None:
    """Keep a row just written as verified, when ``run`` is what decoding it would give.

    A runtime step writes its record and reads it back at its next commit:
    checking and decoding the whole record again each time was the largest cost
    of a loaded runtime's commits (issue 42). ``run`` stands for its row only
    when it differs from ``before`` (a record read, that is decoded, in the same
    transaction) in plain values alone, those decoding gives back as they are;
    any other row is verified and decoded when read. A row read back equals this
    one byte for byte, its checksum included, or is verified as any other; one
    whose transaction rolled back is never read.
    """
    if before is None or not _plain_change(before, run):
        return
    if len(VERIFIED) >= VERIFIED_MAX:
        VERIFIED.clear()
    VERIFIED[(run.run_id, False)] = VERIFIED[(run.run_id, True)] = (row, run)


def _plain_change(before: RuntimeRun, after: RuntimeRun) -> bool:
    """Whether every field ``after`` changed holds a value decoding gives back unchanged."""
    if before.run_id != after.run_id or before.model_fields_set != after.model_fields_set:
        return False
    old = before.__dict__
    for name, value in after.__dict__.items():
        was = old[name]
        if value is was:
            continue
        kind = type(value)
        if kind is str:
            if not value.isascii() and not _encodes(value):
                return False  # a lone surrogate: stored as U+FFFD
        elif kind is int:
            if was is not None and type(was) is not int:
                return False
        elif kind is bool:
            if type(was) is not bool:
                return False
        elif value is not None:
            return False  # a list, a dict, a model: decoded anew when read
        if was is not None and type(was) is not kind and value is not None:
            return False
    return True


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def same_count(found: int, counted: int, by: str) -> None:
    if found != counted:
        raise StoreCorruptionError(
            f"the indexes of rt_runs disagree: {found} records by {by}, {counted} counted "
            "through another index (a damaged index)"
        )


def decode_record(text: str) -> RuntimeRun:
    try:
        return validate_stored(RuntimeRun, text)
    except ValidationError as exc:
        raise StoreCorruptionError(f"a run record does not decode: {exc}") from exc


def decode_intent(text: str) -> ToolIntent:
    try:
        return validate_stored(ToolIntent, text)
    except ValidationError as exc:
        raise StoreCorruptionError(f"a tool intent does not decode: {exc}") from exc


INTENT_FIELDS = frozenset(ToolIntent.model_fields)
INTENT_REQUIRED = INTENT_FIELDS - {"result"}


def verified_intents(texts: builtins.list[str]) -> builtins.list[ToolIntent] | None:
    """Intents of checksum-verified rows in their usual shape, built without validation.

    One JSON parse for all of them, then types and keys checked (as
    :mod:`.._trusted` does for messages); None when any is unusual (then each is
    validated). A runtime resuming a 5,000-step run reads 5,000 intents.
    """
    if not texts:
        return None
    try:
        data = json.loads("[" + ",".join(texts) + "]")
    except ValueError:
        return None
    if type(data) is not list or len(data) != len(texts):
        return None
    found = []
    for item in data:
        if (
            type(item) is not dict
            or not INTENT_REQUIRED <= item.keys() <= INTENT_FIELDS
            or type(item["run_id"]) is not str
            or type(item["tool_call_id"]) is not str
            or type(item["tool_name"]) is not str
            or type(item["step_index"]) is not int
            or item["state"] not in ("started", "completed")
        ):
            return None
        result = item.get("result")
        if result is not None and type(result) is not dict:
            return None
        values = {
            "run_id": item["run_id"],
            "tool_call_id": item["tool_call_id"],
            "tool_name": item["tool_name"],
            "step_index": item["step_index"],
            "state": item["state"],
            "result": result,
        }
        found.append(built(ToolIntent, values, item.keys()))
    return found
