"""The runtime tables' schema and statements in the PostgreSQL store.

The tables (:data:`RUNTIME_MIGRATION`, schema version 3), the task and graph
columns (version 4), the claim's columns, indexes and lock rows (version 5),
and every statement :class:`._runs.PostgresRunRecords` runs, built once per
schema. Which lock each statement takes, and why, is told in :mod:`._runs`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ...runs import ACTIVE_STATES, CLAIMABLE_STATES, UNFINISHED_STATES

__all__ = [
    "CLAIM_CANDIDATES",
    "RUNTIME_MIGRATION",
    "RUNTIME_MIGRATION_V4",
    "RUNTIME_MIGRATION_V5",
    "Statements",
    "candidate_statement",
    "statements",
    "unnoted_statement",
]

RUNTIME_MIGRATION: tuple[str, ...] = (
    """CREATE TABLE {s}.rt_runs (
        run_id text PRIMARY KEY,
        seq bigint NOT NULL UNIQUE,
        session_id text NOT NULL,
        state text NOT NULL,
        request_id text UNIQUE,
        fence bigint NOT NULL,
        record text NOT NULL
    )""",
    "CREATE INDEX rt_runs_session ON {s}.rt_runs (session_id, state, seq)",
    "CREATE INDEX rt_runs_state ON {s}.rt_runs (state, seq)",
    """CREATE TABLE {s}.rt_intents (
        run_id text NOT NULL,
        tool_call_id text NOT NULL,
        intent text NOT NULL,
        PRIMARY KEY (run_id, tool_call_id)
    )""",
    """CREATE TABLE {s}.rt_journal (
        run_id text NOT NULL,
        step_index integer NOT NULL,
        response text NOT NULL,
        PRIMARY KEY (run_id, step_index)
    )""",
)
"""Schema version 3: ``rt_runs``, ``rt_intents``, ``rt_journal`` (``{s}``: the quoted schema)."""

RUNTIME_MIGRATION_V4: tuple[str, ...] = (
    "ALTER TABLE {s}.rt_runs ADD COLUMN kind text NOT NULL DEFAULT 'agent'",
    "ALTER TABLE {s}.rt_runs ADD COLUMN graph_id text",
    "CREATE INDEX rt_runs_kind ON {s}.rt_runs (kind, state)",
    "CREATE INDEX rt_runs_graph ON {s}.rt_runs (graph_id, seq)",
)
"""Schema version 4: ``kind`` and ``graph_id`` columns of ``rt_runs`` (tasks and graphs)."""

# Claimable now, or once a lease expires: the claim index's rows.
_CLAIMABLE_STATES = (*sorted(CLAIMABLE_STATES), *sorted(ACTIVE_STATES))
_CLAIMABLE = "state IN ({})".format(", ".join(f"'{state}'" for state in _CLAIMABLE_STATES))
_EMBEDDED = "(engine IS NULL OR engine = 'embedded')"

RUNTIME_MIGRATION_V5: tuple[str, ...] = (
    "ALTER TABLE {s}.rt_runs ADD COLUMN agent_id text, ADD COLUMN agent_version text, "
    "ADD COLUMN engine text, ADD COLUMN due_at bigint, "
    "ADD COLUMN waiting boolean NOT NULL DEFAULT false",
    # The new columns of the runs recorded so far, from their records.
    "UPDATE {s}.rt_runs SET agent_id = r->>'agent_id', agent_version = r->>'agent_version', "
    "engine = r->>'engine', waiting = (r->>'waiting_reason') IS NOT NULL, "
    "due_at = CASE state WHEN 'pending' THEN 0 "
    "WHEN 'retry_wait' THEN coalesce((r->>'next_attempt_at')::bigint, 0) "
    "WHEN 'running' THEN coalesce((r->>'lease_expires_at')::bigint, 0) "
    "WHEN 'cancelling' THEN coalesce((r->>'lease_expires_at')::bigint, 0) END "
    "FROM (SELECT run_id AS id, record::jsonb AS r FROM {s}.rt_runs) j WHERE run_id = j.id",
    "CREATE SEQUENCE {s}.rt_runs_seq OWNED BY {s}.rt_runs.seq",
    "SELECT setval('{s}.rt_runs_seq', coalesce((SELECT max(seq) FROM {s}.rt_runs), 0) + 1, false)",
    # A claim's: the claimable runs of one (agent, version) in submission order.
    f"CREATE INDEX rt_runs_claim ON {{s}}.rt_runs (agent_id, agent_version, kind, seq) "
    f"WHERE {_CLAIMABLE} AND {_EMBEDDED}",
    # An idle claim's: the eligible runs no claim has looked at yet (their
    # waiting reason is then written once, and they leave the index).
    f"CREATE INDEX rt_runs_unnoted ON {{s}}.rt_runs (kind, seq) "
    f"WHERE NOT waiting AND {_CLAIMABLE} AND {_EMBEDDED}",
    "CREATE TABLE {s}.rt_locks (key text PRIMARY KEY)",
)
"""Schema version 5: the claim's columns and indexes, the run sequence, ``rt_locks``.

``agent_id``, ``agent_version``, ``engine`` (from the record), ``due_at`` (when
the run is claimable: 0 when pending, ``next_attempt_at`` in ``retry_wait``,
``lease_expires_at`` while running; NULL otherwise) and ``waiting`` (a waiting
reason is recorded); ``rt_runs_seq`` numbers submissions; ``rt_locks`` holds
one row per session, request id and graph that a submission or a finish locks.
"""

_UNFINISHED = ", ".join(f"'{s}'" for s in sorted(UNFINISHED_STATES))
_COLUMNS = (
    "run_id, seq, session_id, state, request_id, fence, kind, graph_id, "
    "agent_id, agent_version, engine, due_at, waiting, record"
)
_UPDATED = ", ".join(
    f"{name} = EXCLUDED.{name}" for name in _COLUMNS.split(", ") if name != "run_id"
)
CLAIM_CANDIDATES = 16  # runs a claim looks at, at most, before it gives up for this poll
_NOTE_BATCH = 1000  # unserved runs an idle claim gives their waiting reason, at most, per poll


@dataclass(frozen=True)
class Statements:
    """Every runtime statement, for one schema."""

    lock_keys: str
    put: str
    submit_facts: str
    count_kind: str
    taken: str
    next_seqs: str
    graph: str
    graph_for_update: str
    get: str
    get_for_update: str
    renewable: str
    fence_for_share: str
    list_all: str
    list_states: str
    session_states: str
    session_head: str
    put_intent: str
    intents: str
    put_journal: str
    journaled: str
    announce: str
    forget: tuple[str, ...]
    forget_keys: str
    db_now: str


@functools.lru_cache(maxsize=64)
def statements(schema: str) -> Statements:
    # The store validated the name (_schema.quote_ident) before this runs.
    s = '"' + schema.replace('"', '""') + '"'
    sequence = "'" + f"{s}.rt_runs_seq".replace("'", "''") + "'"
    unfinished = f"state IN ({_UNFINISHED})"
    return Statements(
        # ON CONFLICT DO UPDATE locks the row (new or not) until commit; keys
        # are sorted, so two writers locking several never deadlock.
        lock_keys=(
            f"INSERT INTO {s}.rt_locks (key) SELECT k FROM unnest(%s::text[]) AS k ORDER BY k "
            "ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key"
        ),
        put=(
            f"INSERT INTO {s}.rt_runs ({_COLUMNS}) VALUES ({', '.join(['%s'] * 14)}) "
            f"ON CONFLICT (run_id) DO UPDATE SET {_UPDATED}"
        ),
        # What a submission checks, in one round trip: the run a repeated
        # request id names, the unfinished count, whether the session is busy,
        # whether the run id is taken, the next seq.
        submit_facts=(
            f"SELECT (SELECT record FROM {s}.rt_runs WHERE request_id = %(request_id)s), "
            f"(SELECT count(*) FROM {s}.rt_runs WHERE kind = %(kind)s AND {unfinished}), "
            f"EXISTS (SELECT 1 FROM {s}.rt_runs WHERE session_id = %(session_id)s "
            f"AND {unfinished}), "
            f"EXISTS (SELECT 1 FROM {s}.rt_runs WHERE run_id = %(run_id)s), "
            f"nextval({sequence})"
        ),
        count_kind=f"SELECT count(*) FROM {s}.rt_runs WHERE kind = %s AND {unfinished}",
        taken=f"SELECT run_id FROM {s}.rt_runs WHERE run_id = ANY(%s) LIMIT 1",
        next_seqs=f"SELECT nextval({sequence}) FROM generate_series(1, %s)",
        graph=f"SELECT record FROM {s}.rt_runs WHERE graph_id = %s ORDER BY seq",
        graph_for_update=(
            f"SELECT record FROM {s}.rt_runs WHERE graph_id = %s ORDER BY seq FOR UPDATE"
        ),
        get=f"SELECT record FROM {s}.rt_runs WHERE run_id = %s",
        get_for_update=f"SELECT record FROM {s}.rt_runs WHERE run_id = %s FOR UPDATE",
        renewable=f"SELECT record FROM {s}.rt_runs WHERE run_id = %s AND fence = %s FOR UPDATE",
        fence_for_share=f"SELECT fence, due_at, kind FROM {s}.rt_runs WHERE run_id = %s FOR SHARE",
        list_all=f"SELECT record FROM {s}.rt_runs ORDER BY seq",
        list_states=f"SELECT record FROM {s}.rt_runs WHERE state = ANY(%s) ORDER BY seq",
        session_states=(
            f"SELECT record FROM {s}.rt_runs WHERE session_id = %s AND state = ANY(%s) ORDER BY seq"
        ),
        session_head=(
            f"SELECT record FROM {s}.rt_runs WHERE session_id = %s AND {unfinished} "
            "ORDER BY seq LIMIT 1 FOR UPDATE"
        ),
        put_intent=(
            f"INSERT INTO {s}.rt_intents (run_id, tool_call_id, intent) VALUES (%s, %s, %s) "
            "ON CONFLICT (run_id, tool_call_id) DO UPDATE SET intent = EXCLUDED.intent"
        ),
        intents=f"SELECT intent FROM {s}.rt_intents WHERE run_id = %s",
        put_journal=(
            f"INSERT INTO {s}.rt_journal (run_id, step_index, response) VALUES (%s, %s, %s) "
            "ON CONFLICT (run_id, step_index) DO UPDATE SET response = EXCLUDED.response"
        ),
        journaled=f"SELECT response FROM {s}.rt_journal WHERE run_id = %s AND step_index = %s",
        # Sent at commit (payload: the run id on the event channel, the kind on the work one).
        announce="SELECT pg_notify(%s::text, %s::text)",
        forget=tuple(
            f"DELETE FROM {s}.{table} WHERE run_id = ANY(%s)"
            for table in ("rt_runs", "rt_intents", "rt_journal")
        ),
        # The lock rows of deleted runs' sessions and graphs no run is left in, and of
        # their request ids (one run each).
        forget_keys=(
            f"DELETE FROM {s}.rt_locks WHERE key IN ("
            f"SELECT 'session:' || g.session_id FROM {s}.rt_runs g "
            "WHERE g.run_id = ANY(%(ids)s) AND NOT EXISTS (SELECT 1 FROM "
            f"{s}.rt_runs o WHERE o.session_id = g.session_id AND o.run_id <> ALL(%(ids)s)) "
            f"UNION ALL SELECT 'graph:' || g.graph_id FROM {s}.rt_runs g "
            "WHERE g.run_id = ANY(%(ids)s) AND g.graph_id IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {s}.rt_runs o WHERE o.graph_id = g.graph_id "
            "AND o.run_id <> ALL(%(ids)s)) "
            f"UNION ALL SELECT 'request:' || g.request_id FROM {s}.rt_runs g "
            "WHERE g.run_id = ANY(%(ids)s) AND g.request_id IS NOT NULL)"
        ),
        # clock_timestamp(), not now(): the time of the call, not of the transaction.
        db_now="SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
    )


@functools.lru_cache(maxsize=256)
def candidate_statement(schema: str, pairs: int) -> str:
    """A claim's candidate among ``pairs`` served ``(agent, version)`` pairs, locked.

    Of the oldest few eligible runs of each pair (one bounded range of
    ``rt_runs_claim`` each: the pairs are parameters the planner sees, not an
    array it cannot estimate), the oldest whose row no other transaction holds,
    locked ``FOR UPDATE SKIP LOCKED``: a locked row is skipped, never waited for.
    Parameters: ``a0, v0, a1, v1, ...``, ``kinds`` (``[kind]``), ``now``, ``skip``.
    """
    s = '"' + schema.replace('"', '""') + '"'
    unfinished = f"state IN ({_UNFINISHED})"
    branches = [
        f"(SELECT x.run_id, x.seq FROM {s}.rt_runs x "
        f"WHERE x.agent_id = %(a{i})s AND x.agent_version = %(v{i})s AND x.kind = ANY(%(kinds)s) "
        f"AND x.{_CLAIMABLE} AND (x.engine IS NULL OR x.engine = 'embedded') "
        "AND x.due_at <= %(now)s AND x.run_id <> ALL(%(skip)s::text[]) "
        # the oldest unfinished run of its session: a claim takes no other
        f"AND NOT EXISTS (SELECT 1 FROM {s}.rt_runs o WHERE o.session_id = x.session_id "
        f"AND o.{unfinished} AND o.seq < x.seq) "
        # (kind, seq): the order of rt_runs_claim's range, which no other index has
        f"ORDER BY x.kind, x.seq LIMIT {CLAIM_CANDIDATES})"
        for i in range(pairs)
    ]
    return (
        f"SELECT record FROM {s}.rt_runs WHERE run_id IN ("
        f"SELECT c.run_id FROM ({' UNION ALL '.join(branches)}) c "
        f"ORDER BY c.seq LIMIT {CLAIM_CANDIDATES}) "
        f"AND {_CLAIMABLE} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED"
    )


@functools.lru_cache(maxsize=256)
def unnoted_statement(schema: str, pairs: int) -> str:
    """An idle claim's look at eligible runs of other agents that no claim noted yet.

    Reads ``rt_runs_unnoted`` in order (a run leaves it once its waiting reason
    is written), at most a batch, locked ``FOR UPDATE SKIP LOCKED``. The kind
    comes as a one-element array, so ``(kind, seq)`` is an order only that index
    gives: the planner never walks every run in seq order instead, whatever its
    statistics say.
    Parameters as :func:`candidate_statement`'s.
    """
    s = '"' + schema.replace('"', '""') + '"'
    values = ", ".join(f"(%(a{i})s, %(v{i})s)" for i in range(pairs))
    others = f"AND (agent_id, agent_version) NOT IN (VALUES {values}) " if pairs else ""
    return (
        f"SELECT record FROM {s}.rt_runs WHERE NOT waiting AND kind = ANY(%(kinds)s) "
        f"AND {_CLAIMABLE} AND {_EMBEDDED} AND due_at <= %(now)s {others}"
        f"ORDER BY kind, seq LIMIT {_NOTE_BATCH} FOR UPDATE SKIP LOCKED"
    )
