"""The PostgreSQL store's SQL: every statement, for one schema, and the event rows.

Statements are built once per store (the schema is part of each); their
parameters are named after the checkpoint row's columns (:data:`.rows.COLUMNS`)
and, for an append, after :func:`event_params`' keys.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...events._model import Event, NewEvent, numbered
from .._rows import COLUMNS
from ._schema import quote_ident

__all__ = ["Statements", "added_events", "event_from_row", "event_params"]

_META = ", ".join(f"c.{name}" for name in COLUMNS)
# Parameters in a SELECT list get no type from the target column: cast each one.
_CASTS = {
    "version": "integer",
    "step_index": "integer",
    "status": "text",
    "message_count": "integer",
    "usage": "text",
    "pending_approvals": "text",
    "agent_path": "text",
    "created_at": "bigint",
    "finish_reason": "text",
    "extra": "text",
}
_EVENT_COLUMNS = "position, type, step_index, operation_id, attempt_id, payload, created_at"
_MAX_NOTICE = 7999  # bytes: a NOTIFY payload must be shorter than 8000


@dataclass(frozen=True)
class Statements:
    """Every statement the store runs, for one schema."""

    delete_lock: str
    insert_nodes: str
    insert_checkpoint: str
    latest: str
    at_step: str
    chain_latest: str
    chain_at_step: str
    history: str
    list: str
    runs: str
    sweep: str
    delete_checkpoints: str
    delete_run: str
    append_events: str
    save_with_events: str
    read_events: str
    known_run: str
    last_offset: str
    delete_event_head: str
    delete_events: str
    table_bytes: str
    vacuum: tuple[str, ...]

    @classmethod
    def for_schema(cls, schema: str) -> Statements:
        """The statements on the tables of ``schema``."""
        s = quote_ident(schema)
        latest = (
            f"SELECT c.seq, c.head, {_META} FROM {s}.runs r JOIN {s}.checkpoints c "
            "ON c.run_id = r.run_id AND c.seq = r.last_seq WHERE r.run_id = %s"
        )
        at_step = (
            f"SELECT c.seq, c.head, {_META} FROM {s}.checkpoints c "
            "WHERE c.run_id = %s AND c.step_index = %s ORDER BY c.seq DESC LIMIT 1"
        )
        values = ", ".join(f"%({name})s::{_CASTS[name]}" for name in COLUMNS)
        # The run's row in the runs table, bumped and locked until commit.
        upsert_run = f"""
            INSERT INTO {s}.runs AS r (run_id, created_at, updated_at, last_seq)
            SELECT %(run_id)s::text, %(created_at)s::bigint, %(created_at)s::bigint, 1
            WHERE %(base)s::bytea IS NULL
               OR EXISTS (SELECT 1 FROM {s}.nodes WHERE id = %(base)s::bytea)
            ON CONFLICT (run_id) DO UPDATE
            SET last_seq = r.last_seq + 1, updated_at = EXCLUDED.updated_at
            RETURNING last_seq
        """
        insert_row = (
            f"INSERT INTO {s}.checkpoints (run_id, seq, head, {', '.join(COLUMNS)}) "
            f"SELECT %(run_id)s::text, r.last_seq, %(head)s::bytea, {values} FROM r"
        )
        return cls(
            # Saves insert into both tables (ROW EXCLUSIVE, which saves share); a
            # delete locks them in SHARE mode, so it waits for the saves in
            # flight and the next ones wait for it: it never sweeps a node a
            # concurrent save is about to reference. Saves take no lock of their own.
            delete_lock=f"LOCK TABLE {s}.nodes, {s}.checkpoints IN SHARE MODE",
            # The new nodes, unless the node they hang from is gone (see below).
            insert_nodes=f"""
                INSERT INTO {s}.nodes (id, parent, message)
                SELECT * FROM unnest(%(ids)s::bytea[], %(parents)s::bytea[], %(texts)s::text[])
                WHERE %(base)s::bytea IS NULL
                   OR EXISTS (SELECT 1 FROM {s}.nodes WHERE id = %(base)s::bytea)
                ON CONFLICT (id) DO NOTHING
            """,
            # One statement bumps the run's last_seq (the upsert locks the run
            # row until commit, so two saves of one run serialize) and inserts
            # the checkpoint row under that seq. When the node the new ones hang
            # from (base) is gone, deleted since this process saw it, the save
            # writes nothing and the caller sees a row count of 0.
            insert_checkpoint=f"WITH r AS ({upsert_run}) {insert_row}",
            append_events=f"WITH {_append(s, '')}",
            # A checkpoint with its events, in one statement: the events hang
            # from the run row's upsert, so they are written exactly when the
            # checkpoint is (not when its base node is gone and the save is
            # sent again).
            save_with_events=(
                f"WITH r AS ({upsert_run}), checkpoint AS ({insert_row}), {_append(s, 'FROM r')}"
            ),
            read_events=(
                f"SELECT {_EVENT_COLUMNS} FROM {s}.events "
                "WHERE run_id = %s AND position > %s ORDER BY position LIMIT %s"
            ),
            known_run=(
                f"SELECT EXISTS (SELECT 1 FROM {s}.runs WHERE run_id = %(run_id)s) "
                f"OR EXISTS (SELECT 1 FROM {s}.event_heads WHERE run_id = %(run_id)s) "
                f"OR EXISTS (SELECT 1 FROM {s}.rt_runs WHERE run_id = %(run_id)s)"
            ),
            last_offset=f"SELECT last_position FROM {s}.event_heads WHERE run_id = %s",
            # The counter row goes first: deleting it waits for an append in
            # flight, and the next statement's snapshot then sees that
            # append's events too.
            delete_event_head=f"DELETE FROM {s}.event_heads WHERE run_id = ANY(%s)",
            delete_events=f"DELETE FROM {s}.events WHERE run_id = ANY(%s)",
            latest=latest,
            at_step=at_step,
            chain_latest=_chain(s, latest),
            chain_at_step=_chain(s, at_step),
            history=(
                f"SELECT c.seq, c.head, {_META} FROM {s}.checkpoints c "
                "WHERE c.run_id = %s ORDER BY c.seq"
            ),
            list=f"SELECT run_id FROM {s}.runs ORDER BY id",
            runs=(
                f"SELECT r.run_id, r.last_seq, r.created_at, {_META} FROM {s}.runs r "
                f"JOIN {s}.checkpoints c ON c.run_id = r.run_id AND c.seq = r.last_seq "
                "ORDER BY r.id"
            ),
            # Deleting runs (a set: a prune deletes hundreds per statement):
            # their nodes ("mine") go, except those another checkpoint still
            # reaches (a head of a run outside the set, or the parent of a node
            # outside the set, and all their ancestors). One statement, so it
            # sees the runs' own checkpoints and excludes them by run_id.
            sweep=f"""
                WITH RECURSIVE mine(id) AS (
                    SELECT head FROM {s}.checkpoints
                    WHERE run_id = ANY(%(run_ids)s) AND head IS NOT NULL
                    UNION
                    SELECT n.parent FROM {s}.nodes n JOIN mine ON n.id = mine.id
                    WHERE n.parent IS NOT NULL
                ),
                keep(id) AS (
                    SELECT m.id FROM mine m
                    WHERE EXISTS (SELECT 1 FROM {s}.checkpoints c
                                  WHERE c.head = m.id AND c.run_id <> ALL(%(run_ids)s))
                       OR EXISTS (SELECT 1 FROM {s}.nodes n WHERE n.parent = m.id
                                  AND NOT EXISTS (SELECT 1 FROM mine x WHERE x.id = n.id))
                    UNION
                    SELECT n.parent FROM {s}.nodes n JOIN keep ON n.id = keep.id
                    WHERE n.parent IS NOT NULL
                )
                DELETE FROM {s}.nodes
                WHERE id IN (SELECT id FROM mine) AND id NOT IN (SELECT id FROM keep)
            """,
            delete_checkpoints=f"DELETE FROM {s}.checkpoints WHERE run_id = ANY(%s)",
            delete_run=f"DELETE FROM {s}.runs WHERE run_id = ANY(%s)",
            table_bytes=(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_catalog.pg_class c "
                "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r'"
            ),
            vacuum=tuple(
                f"VACUUM (ANALYZE) {s}.{table}"
                for table in (
                    "nodes",
                    "checkpoints",
                    "runs",
                    "events",
                    "event_heads",
                    "rt_runs",
                    "rt_intents",
                    "rt_journal",
                    "rt_locks",
                )
            ),
        )


def _append(s: str, source: str) -> str:
    """The CTEs and final SELECT appending a batch of events to a run's log.

    The upsert of the run's counter row adds the batch's size and returns the
    new last offset; the row stays locked until commit, so appenders of one run
    (from any process) queue on it and the offsets have no hole. The batch
    arrives as one array per column, sent in binary (psycopg's text format
    escapes every element with a regular expression: five times slower). The
    statement returns the last offset and sends ``NOTIFY`` (delivered at
    commit); it returns no row when ``source`` (``FROM r``: the run row's
    upsert) yields none.
    """
    return f"""
        head AS (
            INSERT INTO {s}.event_heads AS h (run_id, last_position)
            SELECT %(run_id)s::text, %(count)s::bigint {source}
            ON CONFLICT (run_id) DO UPDATE
            SET last_position = h.last_position + EXCLUDED.last_position
            RETURNING last_position
        ),
        added AS (
            INSERT INTO {s}.events (run_id, {_EVENT_COLUMNS})
            SELECT %(run_id)s::text, head.last_position - %(count)s::bigint + e.ord,
                   e.type, e.step_index, e.operation_id, e.attempt_id, e.payload, e.created_at
            FROM head, unnest(%(types)b::text[], %(steps)b::integer[], %(operations)b::text[],
                              %(attempts)b::text[], %(payloads)b::text[], %(times)b::bigint[])
                 WITH ORDINALITY AS e(type, step_index, operation_id, attempt_id, payload,
                                      created_at, ord)
        )
        SELECT head.last_position, pg_notify(%(channel)s::text, %(notice)s::text) FROM head
    """


def _chain(s: str, checkpoint: str) -> str:
    # One query walks the chain from the checkpoint's head up to the root; it
    # finds the checkpoint itself, so it needs no value from an earlier query.
    # The depth bound stops a corrupt cycle, and verify_chain notices a chain
    # that is too short or too long.
    return f"""
        WITH RECURSIVE c AS ({checkpoint}),
        chain(id, parent, message, depth) AS (
            SELECT n.id, n.parent, n.message, 1 FROM {s}.nodes n JOIN c ON n.id = c.head
            UNION ALL
            SELECT n.id, n.parent, n.message, chain.depth + 1
            FROM {s}.nodes n JOIN chain ON n.id = chain.parent
            WHERE chain.depth < (SELECT c.message_count FROM c)
        )
        SELECT id, parent, message FROM chain ORDER BY depth DESC
    """


def event_params(run_id: str, events: Sequence[NewEvent], channel: str) -> dict[str, Any]:
    """An append's parameters: one array per column, and the notification on ``channel``."""
    notice = run_id if len(run_id.encode()) <= _MAX_NOTICE else ""
    return {
        "run_id": run_id,
        "count": len(events),
        "types": [e.type for e in events],
        "steps": [e.step_index for e in events],
        "operations": [e.operation_id for e in events],
        "attempts": [e.attempt_id for e in events],
        "payloads": [json.dumps(e.payload, separators=(",", ":")) for e in events],
        "times": [e.created_at for e in events],
        "channel": channel,
        "notice": notice,
    }


def added_events(run_id: str, events: Sequence[NewEvent], last: int) -> list[Event]:
    """The appended events with their offsets, the last one being ``last``."""
    return numbered(run_id, events, last - len(events))[:]


def event_from_row(run_id: str, row: tuple[Any, ...]) -> Event:
    """The event a row of the events table holds.

    Raises:
        ValueError: Its payload is not JSON.
    """
    position, type_, step_index, operation_id, attempt_id, payload, created_at = row
    return Event(
        run_id=run_id,
        offset=position,
        type=type_,
        step_index=step_index,
        operation_id=operation_id,
        attempt_id=attempt_id,
        payload=json.loads(payload),
        created_at=created_at,
    )
