"""What a resume reads: the event log's tail from the latest checkpoint, verified rows built fast."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.durable.store._events import EventLog, events_since
from nbdurable.events import CHECKPOINT_SAVED
from nbdurable.stores._rows import COLUMNS, CheckpointRow, verified_infos
from nbdurable.stores.sqlite._checkpoints import _HISTORY
from nbdurable.stores.sqlite._run_rows import decode_intent, verified_intents


async def _run(store: object, steps: int) -> None:
    @nd.tool
    def probe(i: int) -> str:
        """Probe."""
        return f"probe {i}"

    turns: list[object] = [nd.Turn.call("probe", i=i) for i in range(steps)]
    model = nd.ScriptedModel([*turns, "Done."], mode="sequential")
    await nd.generate_text(
        model=model,
        messages="Go.",
        tools=[probe],
        max_steps=steps + 1,
        session=nd.DurableSession(store, run_id="r"),  # type: ignore[arg-type]
    )


class Counting(nd.SqliteSessionStore):
    """Counts the events each read returns."""

    read: list[int]

    def read_events(self, run_id: str, after: int = 0, limit: int | None = None) -> list:  # type: ignore[override]
        found = super().read_events(run_id, after, limit)
        self.read.append(len(found))
        return found


async def test_events_since_reads_the_tail_of_a_long_log(tmp_path: Path) -> None:
    store = Counting(tmp_path / "s.db")
    store.read = []
    await _run(store, 120)
    everything = store.read_events("r")
    store.read.clear()
    tail = events_since(store, "r", CHECKPOINT_SAVED)
    last = max(i for i, e in enumerate(everything) if e.type == CHECKPOINT_SAVED)
    assert tail == everything[last:]
    assert store.last_event_offset("r") == everything[-1].offset
    assert sum(store.read) < len(everything) // 4  # one window of 64, not the whole log
    store.close()


async def test_events_since_without_the_type_returns_the_whole_log() -> None:
    store = nd.InMemorySessionStore()
    await _run(store, 3)
    everything = store.read_events("r")
    assert events_since(store, "r", "no_such_type") == everything
    assert EventLog.last_event_offset(store, "r") == everything[-1].offset  # the default
    assert store.last_event_offset("unknown") == 0


async def test_verified_rows_build_the_same_infos_and_intents(tmp_path: Path) -> None:
    store = nd.SqliteSessionStore(tmp_path / "s.db")
    await _run(store, 5)
    store.close()
    conn = sqlite3.connect(tmp_path / "s.db")
    rows = conn.execute(_HISTORY, ("r",)).fetchall()
    conn.close()
    assert rows
    parsed = [CheckpointRow.from_values("r", values[2 : 2 + len(COLUMNS)]) for values in rows]
    assert verified_infos(parsed) == [row.info() for row in parsed]
    for values in rows:
        row = CheckpointRow.from_values("r", values[2 : 2 + len(COLUMNS)])
        fast, checked = row.info(verified=True), row.info()
        assert fast == checked and repr(fast) == repr(checked)
        assert fast.model_fields_set == checked.model_fields_set
        assert fast.usage.model_fields_set == checked.usage.model_fields_set
        assert fast.model_dump_json(exclude_unset=True) == checked.model_dump_json(
            exclude_unset=True
        )


@pytest.mark.parametrize(
    "text",
    [
        '{"run_id":"r","tool_call_id":"c","tool_name":"t","step_index":1,"state":"started"}',
        '{"run_id":"r","tool_call_id":"c","tool_name":"t","step_index":1,"state":"completed",'
        '"result":{"type":"tool_result","tool_call_id":"c","tool_name":"t","result":1,'
        '"is_error":false}}',
    ],
)
def test_verified_intents_equal_validated_ones(text: str) -> None:
    built = verified_intents([text])
    assert built is not None
    (intent,) = built
    validated = decode_intent(text)
    assert intent == validated and repr(intent) == repr(validated)
    assert intent.model_fields_set == validated.model_fields_set


@pytest.mark.parametrize(
    "text",
    [
        '{"run_id":"r","tool_call_id":"c","tool_name":"t","step_index":"1","state":"started"}',
        '{"run_id":"r","tool_call_id":"c","tool_name":"t","step_index":1,"state":"other"}',
        '{"run_id":"r","tool_call_id":"c","tool_name":"t","step_index":1,"state":"started",'
        '"newer_field":1}',
    ],
)
def test_unusual_intents_take_the_validating_path(text: str) -> None:
    assert verified_intents([text]) is None


def _history(tag: str, n: int) -> tuple[nd.Message, ...]:
    out: list[nd.Message] = [nd.user("same first message")]
    for i in range(n):
        out.append(nd.assistant(f"{tag} {i}"))
    return tuple(out)


def _checkpoint(run_id: str, step: int, messages: tuple[nd.Message, ...]) -> nd.AgentCheckpoint:
    return nd.AgentCheckpoint(
        run_id=run_id, step_index=step, status="running", messages=messages, created_at=1
    )


@pytest.mark.parametrize("interleaved", [False, True])
def test_a_chain_read_by_rowid_range_is_the_chain(tmp_path: Path, interleaved: bool) -> None:
    db = tmp_path / "s.db"
    a, b = _history("a", 60), _history("b", 60)
    with nd.SqliteSessionStore(db) as store:
        # Interleaved saves put the runs' nodes at alternating rowids; both share
        # their first node; a fork of run a shares 30 more.
        for step in range(1, 61, 3):
            store.save(_checkpoint("a", step, a[: step + 1]))
            if interleaved:
                store.save(_checkpoint("b", step, b[: step + 1]))
        store.save(_checkpoint("a", 61, a))
        store.save(_checkpoint("b", 61, b))
        store.save(_checkpoint("fork", 40, (*a[:31], *_history("f", 40)[1:10])))
    for run_id, wanted in (("a", a), ("b", b), ("fork", (*a[:31], *_history("f", 40)[1:10]))):
        with nd.SqliteSessionStore(db) as fresh:
            loaded = fresh.load(run_id)
        assert loaded is not None and loaded.messages == wanted


def test_a_damaged_node_of_another_run_in_the_window_does_not_fail_this_load(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    a, b = _history("a", 40), _history("b", 40)
    with nd.SqliteSessionStore(db) as store:
        for step in range(1, 41):
            store.save(_checkpoint("a", step, a[: step + 1]))
            store.save(_checkpoint("b", step, b[: step + 1]))
    conn = sqlite3.connect(db, isolation_level=None)
    # A node of b written among a's last nodes: invalid UTF-8 stored as TEXT
    # (SQLite cannot decode it), inside the rowid window a's load reads.
    (head,) = conn.execute(
        "SELECT head FROM checkpoints WHERE run_id = 'b' AND step_index = 35"
    ).fetchone()
    conn.execute("UPDATE nodes SET message = CAST(x'ff00ff' AS TEXT) WHERE id = ?", (head,))
    conn.close()
    with nd.SqliteSessionStore(db) as fresh:
        loaded = fresh.load("a")
        assert loaded is not None and loaded.messages == a
        with pytest.raises(nd.StoreCorruptionError):
            fresh.load("b")


def test_a_damaged_node_early_in_a_long_history_is_caught_when_it_is_read(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    history = _history("a", 80)
    with nd.SqliteSessionStore(db) as store:
        for step in range(1, 81):
            store.save(_checkpoint("a", step, history[: step + 1]))
    conn = sqlite3.connect(db, isolation_level=None)
    # The third node now holds another valid message (its hash no longer matches).
    (rowid,) = conn.execute("SELECT rowid FROM nodes ORDER BY rowid LIMIT 1 OFFSET 2").fetchone()
    damaged = nd.assistant("a 9").model_dump_json()
    conn.execute("UPDATE nodes SET message = ? WHERE rowid = ?", (damaged, rowid))
    conn.close()
    with nd.SqliteSessionStore(db) as fresh, pytest.raises(nd.StoreCorruptionError) as caught:
        fresh.load("a")  # read by rowid range and walked: every node's hash still checked
    assert caught.value.run_id == "a"
