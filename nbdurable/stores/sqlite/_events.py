"""The SQLite store's event log: one row per commit (schema version 6).

A commit's events are one ``event_batches`` row: its key is the run and the
offset of the commit's last event, ``first`` the offset of its first, and
``events`` the events as one JSON array packed once (:mod:`._codec`).
Each element is ``[type, step_index, operation, attempt_id, payload,
created_at]``: ``type`` the event type's code (its text for a type this
version does not know), ``operation`` ``true`` for the loop's usual operation
id of the step (``"<run>:model:<step>"``), else the id or ``null``.

A file written before version 6 keeps its ``events`` rows, one per event (see
:mod:`._rows`): they are read as they are, before the batches, and a run
continues its offsets from the higher of the two.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..._errors import StoreCorruptionError
from ...events._model import Event, NewEvent, numbered
from .._packing import (
    EVENT_TYPE_CODES,
    EVENT_TYPES,
    pack_json,
    unpack_json,
    usual_operation,
)
from ._crc import row_crc, verify_row
from ._heads import forget_head, read_head, update_head
from ._rows import compact_json, event_from_row

__all__ = [
    "KNOWN_RUN",
    "LAST_EVENT",
    "LAST_EVENT_SUBQUERY",
    "append_events",
    "EventRows",
    "batch_events",
    "decode_events",
    "delete_events",
    "fetch_events",
]

LAST_EVENT_SUBQUERY = (
    "max(coalesce((SELECT max(position) FROM event_batches WHERE run_id = ?1), 0), "
    "coalesce((SELECT max(position) FROM events WHERE run_id = ?1), 0))"
)
"""A run's last event offset, as an expression of the run id ``?1`` (0 without events)."""
LAST_EVENT = f"SELECT {LAST_EVENT_SUBQUERY}"
KNOWN_RUN = (
    "SELECT EXISTS (SELECT 1 FROM runs WHERE run_id = ?1) "
    "OR EXISTS (SELECT 1 FROM event_batches WHERE run_id = ?1) "
    "OR EXISTS (SELECT 1 FROM events WHERE run_id = ?1) "
    "OR EXISTS (SELECT 1 FROM rt_runs WHERE run_id = ?1)"
)
"""Whether the file knows a run (a checkpoint, an event or a runtime record)."""
_INSERT = "INSERT INTO event_batches (run_id, position, first, events, crc) VALUES (?, ?, ?, ?, ?)"
_READ_BATCHES = (
    "SELECT position, first, events, crc FROM event_batches "
    "WHERE run_id = ? AND position > ? ORDER BY position LIMIT ?"
)
_READ_LEGACY = (
    "SELECT position, type, step_index, operation_id, attempt_id, payload, created_at "
    "FROM events WHERE run_id = ? AND position > ? ORDER BY position LIMIT ?"
)


def _type(code: object) -> Any:
    if type(code) is int:
        if not 0 <= code < len(EVENT_TYPES):
            raise ValueError(f"unknown event type code {code}")
        return EVENT_TYPES[code]
    return code  # a type this version has no code for, as text (validated as one)


def _batch_value(run_id: str, events: Sequence[NewEvent]) -> str | bytes:
    """The stored ``events`` value of a commit's events."""
    items: list[list[Any]] = []
    for e in events:
        step = e.step_index
        op: str | bool | None = e.operation_id
        if op is not None and step is not None and op == usual_operation(run_id, step):
            op = True
        code = EVENT_TYPE_CODES.get(e.type, e.type)
        items.append([code, step, op, e.attempt_id, e.payload, e.created_at])
    return pack_json(compact_json(items))


def append_events(
    conn: sqlite3.Connection,
    run_id: str,
    events: Sequence[NewEvent],
    last: int | None = None,
    *,
    intents: int = 0,
    journal: int = 0,
) -> Sequence[Event]:
    """Write ``events`` as one batch after offset ``last`` (None: the run's last one).

    The run's head takes the new last offset, and ``intents`` / ``journal`` rows
    the same write added (one head update for a commit). Returns the events as
    numbered.
    """
    value = _batch_value(run_id, events)
    head = read_head(conn, run_id)
    if last is None:
        last = (
            head.events
            if head is not None
            else int(conn.execute(LAST_EVENT, (run_id,)).fetchone()[0] or 0)
        )
    row = (run_id, last + len(events), last + 1, value)
    conn.execute(_INSERT, (*row, row_crc("event_batches", row)))
    update_head(
        conn, run_id, events=last + len(events), intents=intents, journal=journal, head=head
    )
    return numbered(run_id, events, last)


def batch_events(run_id: str, position: int, first: int, value: object) -> list[Event]:
    """The events of one stored batch (offsets ``first`` to ``position``).

    Raises:
        StoreCorruptionError: The value does not unpack, is not a batch of that
            many events, or an event in it is not one.
    """
    if type(position) is not int or type(first) is not int:
        raise StoreCorruptionError(f"a batch's offsets are not numbers: {first!r}..{position!r}")
    try:
        items = json.loads(unpack_json(value))
    except ValueError as exc:
        raise StoreCorruptionError(f"events {first}..{position} are not JSON: {exc}") from exc
    if not isinstance(items, list) or len(items) != position - first + 1:
        raise StoreCorruptionError(f"events {first}..{position} are not a batch of that size")
    found: list[Event] = []
    for offset, item in enumerate(items, first):
        try:
            code, step, op, attempt, payload, created = item
            if op is True:
                op = usual_operation(run_id, step)
            found.append(
                Event(
                    run_id=run_id,
                    offset=offset,
                    type=_type(code),
                    step_index=step,
                    operation_id=op,
                    attempt_id=attempt,
                    payload=payload,
                    created_at=created,
                )
            )
        except (ValueError, TypeError) as exc:
            raise StoreCorruptionError(f"event {offset} does not decode: {exc}") from exc
    return found


@dataclass(frozen=True)
class EventRows:
    """A read's rows as stored (see :func:`fetch_events`); decoded by :func:`decode_events`."""

    legacy: list[tuple[Any, ...]]
    batches: list[tuple[Any, ...]]
    last: int
    """The run's last offset as its head says (as the index knows it without a head)."""
    head: bool = False
    """The run has a head row (so the file knows it)."""
    headless: bool = False
    """The run has no head row but has events (damage, unless written before version 7)."""


def fetch_events(conn: sqlite3.Connection, run_id: str, after: int, limit: int | None) -> EventRows:
    """The rows holding the run's events after offset ``after`` (at most ``limit``).

    Only reads: the store calls it under its lock and decodes the rows after it
    released the lock.
    """
    legacy = conn.execute(_READ_LEGACY, (run_id, after, -1 if limit is None else limit))
    rows = legacy.fetchall()
    batches: list[tuple[Any, ...]] = []
    if limit is None or len(rows) < limit:
        since = rows[-1][0] if rows else after
        left = -1 if limit is None else limit - len(rows)
        batches = conn.execute(_READ_BATCHES, (run_id, since, left)).fetchall()
    head = read_head(conn, run_id)
    if head is not None:
        return EventRows(rows, batches, head.events, head=True)
    last = conn.execute(LAST_EVENT, (run_id,)).fetchone()[0] or 0
    return EventRows(rows, batches, last, headless=last > 0)


def decode_events(
    run_id: str, after: int, limit: int | None, rows: EventRows, legacy: bool = True
) -> list[Event]:
    """The events of :func:`fetch_events`'s rows, in order.

    Raises:
        StoreCorruptionError: A stored event does not decode, or an offset is
            missing (a damaged page hid a row).
    """
    try:
        found = [event_from_row(run_id, row) for row in rows.legacy]
        since = found[-1].offset if found else after
        for position, first, value, crc in rows.batches:
            row = (run_id, position, first, value)
            verify_row("event_batches", row, crc, run_id, "a batch", legacy)
            events = batch_events(run_id, position, first, value)
            found.extend(e for e in events if e.offset > since)
        if limit is not None:
            del found[limit:]
    except (ValueError, StoreCorruptionError) as exc:
        raise StoreCorruptionError(
            f"an event of run {run_id!r} is damaged: {exc}", run_id=run_id
        ) from exc
    if rows.headless and not legacy:
        raise StoreCorruptionError(f"the head row of run {run_id!r} is missing", run_id=run_id)
    # Offsets have no holes: a missing one is a row a damaged page hid.
    for i, event in enumerate(found):
        if event.offset != after + i + 1:
            raise StoreCorruptionError(
                f"event {after + i + 1} of run {run_id!r} cannot be read", run_id=run_id
            )
    if limit is None or len(found) < limit:
        # A damaged page can end a read early without an error; the index
        # still knows the last offset.
        got = found[-1].offset if found else after
        if rows.last > got:
            raise StoreCorruptionError(
                f"events {got + 1}..{rows.last} of run {run_id!r} cannot be read", run_id=run_id
            )
    return found


def delete_events(conn: sqlite3.Connection, run_id: str) -> None:
    """Delete a run's events (both forms)."""
    conn.execute("DELETE FROM event_batches WHERE run_id = ?", (run_id,))
    conn.execute("DELETE FROM events WHERE run_id = ?", (run_id,))
    forget_head(conn, run_id)
