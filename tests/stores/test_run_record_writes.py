"""SQLite run records written in place: the same rows, every read still checked (issue 42).

A record change updates its row in place (only the columns that changed), its
JSON is serialized in one call, and a row just written from a plainly changed
record is kept as verified. None of it may change what is stored or let a
damaged row through.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.records import pending_run

import nbdurable as nd
from nbdurable.events._model import NewEvent
from nbdurable.messages import ToolApprovalResponse, VerdictSource
from nbdurable.runs import Decision, LateResult, RunPatch, RuntimeRun, ToolIntent
from nbdurable.stores.sqlite import _run_rows
from nbdurable.stores.sqlite._crc import row_crc


def a_run(run_id: str = "r1", **fields: Any) -> RuntimeRun:
    return pending_run(run_id, **fields)


def raw(path: Path, run_id: str = "r1") -> tuple[Any, ...]:
    with sqlite3.connect(path) as conn:
        return tuple(
            conn.execute(
                "SELECT run_id, seq, session_id, state, request_id, fence, kind, graph_id, "
                "record, crc FROM rt_runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        )


def test_the_stored_json_is_what_model_dump_json_gives() -> None:
    verdict = ToolApprovalResponse(approval_id="ap1", approved=True, reason="ok")
    source = VerdictSource(by="ann", via="cli")
    run = a_run(
        verdicts={"ap1": verdict},
        decided={
            "ap1": Decision(approved=True, at=5),
            "ap2": Decision(approved=False, reason="no", source=source, reply="later"),
        },
        late_results=[LateResult(tool_call_id="c", tool_name="t", step_index=1, fence=2, at=3)],
        grants={"tokens": ["t1"], "revoked": []},
        trace_context={"traceparent": "00-abc"},
        retry_policy={"max_attempts": 3},
        depends_on=["x", "y"],
        error='ünïcode ✓ "quoted" \\ back',
    )
    assert run.stored_json() == run.model_dump_json()
    # A lone surrogate (an exception's text) is stored as U+FFFD, as before.
    odd = RunPatch(error="bad \udcff byte").apply(run).model_copy(update={"reason": "x\ud800"})
    assert odd.stored_json() == odd.model_dump_json()
    assert "\ufffd" in odd.stored_json()


def test_a_change_updates_the_row_in_place_and_reads_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = nd.SqliteSessionStore(path)
    store.rt_insert(a_run(), enqueue=False, max_pending=10)
    before = raw(path)
    with sqlite3.connect(path) as conn:
        rowid = conn.execute("SELECT rowid FROM rt_runs WHERE run_id = 'r1'").fetchone()
    updated = store.rt_update("r1", RunPatch(operations=3, updated_at=9, state="running"))
    after = raw(path)
    assert after[:3] == before[:3] and after[3] == "running"
    with sqlite3.connect(path) as conn:  # updated, not deleted and inserted again
        assert conn.execute("SELECT rowid FROM rt_runs WHERE run_id = 'r1'").fetchone() == rowid
    assert after[-1] == row_crc("rt_runs", after[:-1])
    assert after[-2] == updated.model_dump_json()
    _run_rows.VERIFIED.clear()
    other = nd.SqliteSessionStore(path)  # decoded afresh
    assert other.rt_get("r1") == store.rt_get("r1") == updated
    other.close()
    store.close()


def test_a_commit_of_counters_is_kept_verified_and_damage_is_still_caught(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = nd.SqliteSessionStore(path)
    store.rt_insert(a_run(), enqueue=False, max_pending=10)
    _, record = store.rt_commit("r1", fence=0, changes=RunPatch(operations=1, model_attempts=1))
    assert record is not None
    assert _run_rows.VERIFIED[("r1", False)] == (raw(path), record)
    assert store.rt_get("r1") is record  # the row read back is the one just written
    # The same row with one byte changed (its checksum kept) is refused.
    damaged = raw(path)[-2].replace('"operations":1', '"operations":7')
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE rt_runs SET record = ? WHERE run_id = 'r1'", (damaged,))
    with pytest.raises(nd.StoreCorruptionError):
        store.rt_get("r1")
    with pytest.raises(nd.StoreCorruptionError):
        store.rt_commit("r1", fence=0, changes=RunPatch(operations=2))
    store.close()


def test_a_change_of_lists_or_models_is_decoded_when_read(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = nd.SqliteSessionStore(path)
    store.rt_insert(a_run(), enqueue=False, max_pending=10)
    _run_rows.VERIFIED.clear()
    store.rt_get("r1")
    verdict = ToolApprovalResponse(approval_id="ap1", approved=False, reason="no")
    changed = store.rt_update("r1", RunPatch(verdicts={"ap1": verdict}, notified=["ap1"]))
    assert _run_rows.VERIFIED[("r1", False)][1] is not changed  # not kept as verified
    read = store.rt_get("r1")
    assert read == changed and read is not changed
    store.close()


def test_a_commit_still_writes_intents_journal_and_events_with_the_record(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = nd.SqliteSessionStore(path)
    store.rt_insert(a_run(), enqueue=False, max_pending=10)
    intent = ToolIntent(
        run_id="r1", tool_call_id="c1", tool_name="t", step_index=0, state="started"
    )
    added, record = store.rt_commit(
        "r1",
        fence=0,
        events=[NewEvent(type="x", created_at=1)],
        journal=(0, '{"r": 1}'),
        changes=RunPatch(operations=1),
        intents=[intent],
    )
    assert record is not None and record.operations == 1
    assert [event.type for event in added] == ["x"]
    assert [event.type for event in store.read_events("r1")] == ["x"]
    assert store.rt_intents("r1") == [intent]
    assert store.rt_journaled("r1", 0) == '{"r": 1}'
    with pytest.raises(nd.FencedOutError):
        store.rt_commit("r1", fence=5, changes=RunPatch(operations=2))
    assert store.rt_get("r1") == record
    store.close()


def test_a_completed_intent_is_counted_once_with_or_without_its_started_row(
    tmp_path: Path,
) -> None:
    # A completed intent updates its started row first (one statement): the run's
    # head counts each call once, and one without a started row is inserted.
    path = tmp_path / "s.db"
    store = nd.SqliteSessionStore(path)
    store.rt_insert(a_run(), enqueue=False, max_pending=10)
    started = ToolIntent(
        run_id="r1", tool_call_id="c1", tool_name="t", step_index=0, state="started"
    )
    store.rt_commit("r1", fence=0, intents=[started])
    done = started.model_copy(update={"state": "completed", "result": {"ok": 1}})
    alone = done.model_copy(update={"tool_call_id": "c2"})
    store.rt_commit("r1", fence=0, intents=[done, alone])
    store.rt_commit("r1", fence=0, intents=[done])  # sent again: the same rows
    assert sorted(store.rt_intents("r1"), key=lambda i: i.tool_call_id) == [done, alone]
    with sqlite3.connect(path) as conn:
        for call, text, crc in conn.execute("SELECT tool_call_id, intent, crc FROM rt_intents"):
            assert crc == row_crc("rt_intents", ("r1", call, text))
    other = nd.SqliteSessionStore(path)  # read afresh: the head's count matches the rows
    assert len(other.rt_intents("r1")) == 2
    other.close()
    store.close()
