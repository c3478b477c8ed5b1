"""Run records stored before verdicts were typed read as typed records, in the same JSON.

``fixtures/e5df39e.sqlite`` was written by the code of commit e5df39e, whose
records kept ``verdicts`` and ``decided`` as plain dicts (``make_records.py``
there). Today's code reads them as :class:`ToolApprovalResponse` and
:class:`~nbdurable.runs.Decision`, applies the verdict rule to them, and writes
them back in exactly the form it read.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.messages import ToolApprovalResponse, VerdictSource
from nbdurable.runs import Decision, RunPatch, Verdict

FIXTURE = Path(__file__).parent / "fixtures" / "e5df39e.sqlite"
NOW = 1_800_000_000_000
ADDED = ',"agent_origin":null}'
"""The fields added to the record since e5df39e, at their defaults, and the closing brace."""


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    path = tmp_path / "runs.db"
    shutil.copy(FIXTURE, path)
    return path


def _stored_text(path: Path, run_id: str) -> str:
    with sqlite3.connect(path) as conn:
        (text,) = conn.execute("SELECT record FROM rt_runs WHERE run_id = ?", (run_id,)).fetchone()
    return str(text)


def test_verdicts_stored_as_dicts_read_as_typed_records(old_store: Path) -> None:
    store = nd.open_store(f"sqlite:///{old_store}")
    try:
        record = store.rt_get("r-today")  # type: ignore[attr-defined]
        bare = store.rt_get("r-bare")  # type: ignore[attr-defined]
    finally:
        store.close()
    link = VerdictSource(via="link", addressed_to="lee", minted_by="lee", minted_via="http")
    assert record.state == "pending"
    assert record.verdicts == {
        "ap1": ToolApprovalResponse(
            approval_id="ap1", approved=True, token="v1.tok.en", source=link
        ),
        "ap2": ToolApprovalResponse(
            approval_id="ap2",
            approved=False,
            reason="not the prod one",
            source=VerdictSource(by="ana", via="cli"),
        ),
    }
    first = record.decided["ap1"]
    assert isinstance(first, Decision)
    assert (first.approved, first.at, first.source) == (True, NOW + 5, link)
    assert first.token_sha256 is not None and len(first.token_sha256) == 64
    assert record.decided["ap2"].reason == "not the prod one"
    assert bare.decided == {"ap1": Decision(approved=False, reason="no", at=NOW + 7)}
    assert bare.decided["ap1"].source is None


def test_a_record_reads_and_writes_back_in_the_json_it_was_stored_in(old_store: Path) -> None:
    before = {run_id: _stored_text(old_store, run_id) for run_id in ("r-today", "r-bare")}
    store = nd.open_store(f"sqlite:///{old_store}")
    try:
        for run_id, text in before.items():
            # fields added since e5df39e come at their defaults, after the rest
            dumped = store.rt_get(run_id).model_dump_json()  # type: ignore[attr-defined]
            assert dumped == text[:-1] + ADDED
            store.rt_update(run_id, RunPatch(updated_at=NOW))  # type: ignore[attr-defined]
    finally:
        store.close()
    for run_id, text in before.items():
        after = _stored_text(old_store, run_id)
        assert (
            after
            == text.replace(
                f'"updated_at":{NOW + (9 if run_id == "r-today" else 7)}', f'"updated_at":{NOW}'
            )[:-1]
            + ADDED
        )
        assert '"source"' not in after or run_id == "r-today"  # absent, not null, where none was


def test_the_verdict_rule_reads_old_decisions(old_store: Path) -> None:
    store = nd.open_store(f"sqlite:///{old_store}")
    try:
        record = store.rt_get("r-today")  # type: ignore[attr-defined]
        again = Verdict(record.verdicts["ap1"], ("ap1", "ap2"))
        stored, recorded = store.rt_verdict("r-today", again, now=NOW + 50)  # type: ignore[attr-defined]
        assert not recorded and stored == record  # the same verdict: a repeat
        other = ToolApprovalResponse(approval_id="ap1", approved=False, reason="changed my mind")
        with pytest.raises(nd.ApprovalNotPendingError) as lost:
            store.rt_verdict("r-today", Verdict(other, ("ap1", "ap2")), now=NOW + 60)  # type: ignore[attr-defined]
        assert lost.value.verdict == "approved"
    finally:
        store.close()
