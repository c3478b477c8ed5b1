"""The dashboard's row model: columns, one page out of thousands of runs, queries, approvals."""

from __future__ import annotations

from typing import Any

from nbdurable.notebook.widgets._dashboard_rows import (
    COLUMNS,
    Column,
    PendingApproval,
    Query,
    approval_payload,
    call_summary,
    one_line,
    page_of,
    run_rows,
)

NOW = 1_800_000_000_000
STATES = ["completed", "failed", "waiting_approval", "running", "suspended"]


def full_row(i: int, **changes: Any) -> dict[str, Any]:
    """A full row as nbdurable.inspect builds it (the columns the dashboard reads)."""
    row = {
        "run_id": f"run-{i:05d}",
        "agent": ["janitor", "analyst", None][i % 3],
        "status": STATES[i % len(STATES)],
        "steps": i % 7,
        "total_tokens": (i * 37) % 1000,
        "cost": None if i % 4 == 0 else i / 10_000,
        "created_at": NOW - (5000 - i) * 1000,
        "pending_approvals": 1 if STATES[i % len(STATES)] == "waiting_approval" else 0,
        "session_id": f"session-{i % 10}",
    }
    row.update(changes)
    return row


def many(n: int = 5000) -> list[Any]:
    return run_rows([full_row(i) for i in range(n)], [], now_ms=NOW)


def test_a_page_of_five_thousand_runs_holds_only_its_rows() -> None:
    rows = many()
    page = page_of(rows, Query(page_size=25))
    assert (page.total, page.pages, page.page, len(page.rows)) == (5000, 200, 0, 25)
    assert [r["id"] for r in page.rows[:2]] == ["run-04999", "run-04998"]  # newest first
    last = page_of(rows, Query(page=199, page_size=25))
    assert [r["id"] for r in last.rows][-1] == "run-00000"
    assert page_of(rows, Query(page=10**6)).page == 199  # past the end: the last page
    assert sum(page.counts.values()) == 5000 and page.counts["failed"] == 1000


def test_sorting_puts_blanks_last_both_ways_and_keeps_ties_newest_first() -> None:
    rows = many(40)
    up = page_of(rows, Query(sort_by="cost", page_size=40)).rows
    down = page_of(rows, Query(sort_by="cost", descending=True, page_size=40)).rows
    for ordered in (up, down):
        costs = [r["cells"]["cost"] for r in ordered]
        assert costs[-10:] == [""] * 10 and "" not in costs[:30]
    assert up[0]["id"] == "run-00001" and down[0]["id"] == "run-00039"
    by_steps = page_of(rows, Query(sort_by="steps", page_size=40)).rows
    zero = [r["id"] for r in by_steps if r["cells"]["steps"] == "0"]
    assert zero == sorted(zero, reverse=True)  # equal steps: newest first
    by_agent = page_of(rows, Query(sort_by="agent", page_size=40)).rows
    assert [r["cells"]["agent"] for r in by_agent][-1] == ""  # a loop run has no agent


def test_filters_and_search_narrow_and_counts_stay_for_the_whole_store() -> None:
    rows = many(100)
    unfinished = page_of(rows, Query(status="unfinished", page_size=100))
    assert {r["status"] for r in unfinished.rows} == {"waiting_approval", "running", "suspended"}
    attention = page_of(rows, Query(status="attention", page_size=100))
    assert {r["status"] for r in attention.rows} == {"failed", "waiting_approval", "suspended"}
    assert attention.counts == unfinished.counts == page_of(rows, Query()).counts
    found = page_of(rows, Query(search="ANALYST session-4", page_size=100))
    assert found.total == 4 and all(r["cells"]["agent"] == "analyst" for r in found.rows)
    assert page_of(rows, Query(search="no such words")).rows == []
    assert page_of(rows, Query(search="no such words")).pages == 1


def test_a_query_takes_only_valid_changes_and_a_new_filter_goes_to_page_one() -> None:
    query = Query(page=4)
    assert query.updated({"page": 7}).page == 7
    assert query.updated({"status": "failed"}) == Query(status="failed")
    assert query.updated({"sort_by": "tokens", "descending": True}) == Query(
        sort_by="tokens", descending=True
    )
    assert query.updated({"sort_by": "__class__", "page": -2, "page_size": False}) == Query()
    assert query.updated({"page_size": 10**9}).page_size == 100
    assert query.updated({"search": "x" * 10_000}).search == "x" * 200
    unsortable = (Column("note", "note", "text", lambda r: None, lambda r: "", False),)
    assert query.updated({"sort_by": "note"}, unsortable) == query


def test_cells_are_one_line_and_long_text_keeps_its_full_title() -> None:
    reason = "waits for the warehouse\n\n" + "because the lock is held by a nightly job " * 10
    [row] = run_rows([full_row(1, status="needs_attention")], [], now_ms=NOW)
    assert row.cells["reason"] == ""
    text = one_line(reason)
    assert "\n" not in text and len(text) == 160 and text.endswith("…")
    assert one_line("  short\ttext ") == "short text"
    [priced] = run_rows([full_row(3, cost=0.01234, total_tokens=12345)], [], now_ms=NOW)
    assert priced.cells["cost"] == "$0.0123" and priced.cells["tokens"] == "12,345"
    assert priced.cells["age"] == "1h 23m"


def test_the_row_model_is_a_list_of_column_specs() -> None:
    extra = Column("decided_by", "decided by", "text", lambda r: r.get("who"), lambda r: "ann")
    [row] = run_rows([full_row(2)], [], columns=(*COLUMNS, extra), now_ms=NOW)
    assert row.cells["decided_by"] == "ann" and row.payload()["cells"]["decided_by"] == "ann"
    assert extra.spec() == {
        "key": "decided_by",
        "label": "decided by",
        "kind": "text",
        "sortable": True,
    }


def test_an_approval_row_says_what_is_asked_and_carries_no_token() -> None:
    approval = PendingApproval(
        run_id="run-1",
        approval_id="approval-1",
        tool_name="drop_table",
        args={"name": "stg_2023", "cascade": True},
        agent="janitor",
        requested_at=NOW,
    )
    row = approval_payload(approval, "pending", "")
    assert row["call"] == 'drop_table(name="stg_2023", cascade=true)'
    assert set(row) == {
        "run_id", "approval_id", "tool", "call", "call_full", "agent",
        "requested_at", "state", "message", "answered_at", "token_expired", "args",
        "allow_edit", "parameters",
    }  # fmt: skip
    assert row["args"] == approval.args and row["allow_edit"] is False
    assert row["parameters"] is None  # no Edit form for a tool that does not allow it
    assert call_summary("f", {"text": "x" * 500}).startswith('f(text="xxx')
    assert len(approval_payload(
        PendingApproval("r", "a", "f", {"text": "x" * 500}, "", NOW), "pending", ""
    )["call"]) == 160  # fmt: skip
