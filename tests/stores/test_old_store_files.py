"""Stores written by an earlier release open, check clean and go on with the current code.

Each fixture in tests/stores/fixtures (``<release>.sqlite``, ``<release>.jsonl/``,
written by ``make_fixtures.py``) is copied to a temporary directory and opened
as a user upgrading in place would: the checkpoints load (an inline image, a
sub-agent's path, pending approvals), the runs, run records and events read,
``nbdurable store check`` finds nothing damaged, and the suspended runs resume
to completion with an approval.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.stores._check import check_store

from .fixtures import store_agents as sa

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SQLITE = sorted(FIXTURES.glob("*.sqlite"))
JSONL = sorted(p for p in FIXTURES.glob("*.jsonl") if p.is_dir())
LOOP_RUNS = {"loop-image", "loop-suspended", "loop-subagent"}
RUN_STATES = {
    "rt-chat-1": "completed",
    "rt-chat-2": "completed",
    "rt-image": "completed",
    "rt-failed": "failed",
    "rt-waiting": "waiting_approval",
    "rt-subagent": "waiting_approval",
    "rt-cancelled": "cancelled",
    "g:root": "waiting_approval",
    "g:after": "queued",
    "rt-pending": "pending",
}
WAIT = 30.0


def _copy(fixture: Path, tmp_path: Path) -> str:
    """A copy of ``fixture`` in ``tmp_path``; its store URL."""
    target = tmp_path / fixture.name
    if fixture.is_dir():
        shutil.copytree(fixture, target)
        return f"jsonl:///{target}"
    shutil.copyfile(fixture, target)
    return f"sqlite:///{target}"


def _assert_clean(url: str) -> None:
    report = check_store(url)
    assert report.clean, report.lines()
    assert report.counts, report.lines()


def _child(store: nd.HistoryStore, parent: str) -> str:
    """The run id of the sub-agent's own checkpoints under ``parent``."""
    (child,) = [r for r in store.list() if r.startswith(f"{parent}::researcher#")]
    return child


def _assert_loop_runs(store: nd.HistoryStore) -> None:
    """The loop-level runs read as they were written."""
    assert set(store.list()) >= LOOP_RUNS | {_child(store, "loop-subagent")}
    image = store.load("loop-image")
    assert image is not None and image.status == "completed"
    (part,) = [p for p in image.messages[0].content if isinstance(p, nd.ImagePart)]
    assert (part.data, part.media_type) == (sa.PNG, "image/png")
    assert image.messages[-1].text == "A tiny picture."
    assert [c.step_index for c in store.history("loop-image")] == [0, 1]
    parked = store.load("loop-suspended")
    assert parked is not None and parked.status == "suspended"
    assert [r.tool_name for r in parked.pending_approvals] == ["drop_table"]
    assert parked.pending_approvals[0].token.startswith("v1.")
    nested = store.load("loop-subagent")
    assert nested is not None and nested.status == "suspended"
    assert nested.pending_approvals[0].agent_path == ("researcher",)
    child = store.load(_child(store, "loop-subagent"))
    assert child is not None and child.agent_path == ("researcher",)
    assert {r.run_id for r in store.list_runs()} >= LOOP_RUNS
    for run_id in LOOP_RUNS:
        events = store.read_events(run_id)  # type: ignore[attr-defined]
        assert [e.offset for e in events] == list(range(1, len(events) + 1))
        assert "checkpoint_saved" in {e.type for e in events}


def _approve(store: nd.HistoryStore, run_id: str) -> list[nd.ToolApprovalResponse]:
    checkpoint = store.load(run_id)
    assert checkpoint is not None
    return [
        nd.ToolApprovalResponse(approval_id=r.approval_id, approved=True, token=r.token)
        for r in checkpoint.pending_approvals
    ]


async def _resume_loop_runs(store: nd.HistoryStore) -> None:
    """Both suspended loop-level runs finish with an approval, the signer of the time."""
    signer = nd.ApprovalSigner(sa.SECRET)
    done = await nd.resume_from_checkpoint(
        store,
        "loop-suspended",
        model=sa.janitor_model(),
        tools=[sa.step, sa.drop_table],
        approval_signer=signer,
        approval_responses=_approve(store, "loop-suspended"),
    )
    assert done.status == "completed" and done.text == "Done: dropped stg_2023."
    assert "dropped stg_2023" in [
        r.result for m in done.messages if m.role == "tool" for r in m.tool_results
    ]
    nested = await nd.resume_from_checkpoint(
        store,
        "loop-subagent",
        model=sa.delegator_model(),
        tools=[sa.researcher()],
        approval_signer=signer,
        approval_responses=_approve(store, "loop-subagent"),
    )
    assert nested.status == "completed" and nested.text == "Delegated."
    (result,) = [r for m in nested.messages if m.role == "tool" for r in m.tool_results]
    assert (result.is_error, result.result) == (False, "Research done: tmp_research dropped.")


@pytest.mark.parametrize("fixture", JSONL, ids=lambda p: p.name)
async def test_an_old_jsonl_store_reads_checks_clean_and_resumes(
    fixture: Path, tmp_path: Path
) -> None:
    url = _copy(fixture, tmp_path)
    _assert_clean(url)
    store = nd.open_store(url)
    _assert_loop_runs(store)
    await _resume_loop_runs(store)
    store.close()  # type: ignore[attr-defined]
    _assert_clean(url)


@pytest.mark.parametrize("fixture", SQLITE, ids=lambda p: p.name)
async def test_an_old_sqlite_store_reads_checks_clean_and_resumes(
    fixture: Path, tmp_path: Path
) -> None:
    url = _copy(fixture, tmp_path)
    _assert_clean(url)
    store = nd.open_store(url)
    _assert_loop_runs(store)
    records = {r.run_id: r for r in store.rt_list()}  # type: ignore[attr-defined]
    assert {run_id: r.state for run_id, r in records.items()} == RUN_STATES
    assert records["rt-failed"].reason == "model_error"
    assert records["rt-chat-2"].session_id == "chat"
    assert records["g:after"].depends_on == ["g:root"]
    chat = store.load("rt-chat-2")
    assert chat is not None
    assert [m.text for m in chat.messages] == [
        "Hello.",
        "First answer.",
        "Again.",
        "Second answer.",
    ]
    for run_id, state in RUN_STATES.items():
        events = store.read_events(run_id)  # type: ignore[attr-defined]
        assert [e.offset for e in events] == list(range(1, len(events) + 1))
        states = [e.payload["state"] for e in events if e.type == "run_state"]
        assert states and states[-1] == state, (run_id, states)
    await _resume_loop_runs(store)

    runtime = DurableRuntime(
        store=store,
        agents=sa.agents,
        approval_signer=nd.ApprovalSigner(sa.SECRET),
        approval_max_age_ms=None,  # the fixture's tokens age; their format is what is tested
    )
    async with runtime as rt:
        assert {r.run_id for r in rt.list_runs()} >= set(RUN_STATES)
        waiting = await rt.get_run("rt-waiting")
        (request,) = await waiting.pending_approvals()
        assert request.tool_name == "drop_table"
        await waiting.approve()
        assert (await asyncio.wait_for(waiting.result(), WAIT)).text == "Done: dropped stg_2023."
        nested = await rt.get_run("rt-subagent")
        (request,) = await nested.pending_approvals()
        assert request.agent_path == ("researcher",)
        await nested.approve()
        assert (await asyncio.wait_for(nested.result(), WAIT)).text == "Delegated."
        root = await rt.get_run("g:root")
        await root.approve()
        results = await asyncio.wait_for(rt.graph("g").result(), WAIT)
        assert results["after"].text == "First answer."
        assert "Result of root:\nDone: dropped stg_2023." in results["after"].messages[0].text
        pending = await rt.get_run("rt-pending")
        assert (await asyncio.wait_for(pending.result(), WAIT)).text == "First answer."
    assert store.rt_get("rt-cancelled").state == "cancelled"  # type: ignore[attr-defined]
    store.close()  # type: ignore[attr-defined]
    _assert_clean(url)


def test_there_are_old_store_files_of_both_kinds() -> None:
    assert SQLITE and JSONL
