"""Conformance: the runtime capability's conditional verdict write, on every store declaring it.

``rt_verdict`` records one verdict per approval, only while the run waits for
it; a second, different verdict is refused naming the first; the same verdict
again is a repeat that changes nothing. Two handles (two processes' view of the
store) racing from threads record exactly one.
"""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd
from nbdurable.durable.store import RunStore
from nbdurable.messages import ToolApprovalResponse
from nbdurable.runs import RunPatch, RuntimeRun, Verdict

from ._fixtures import NOW, Reopen, new_run
from ._threads import handles, in_threads


def waiting(store: RunStore, run_id: str = "r1") -> RuntimeRun:
    """A run record parked in ``waiting_approval``."""
    store.rt_insert(new_run(run_id), enqueue=False, max_pending=100)
    return store.rt_update(run_id, RunPatch(state="waiting_approval"))


def verdict(response: dict[str, Any], pending: list[str]) -> Verdict:
    """The verdict ``response`` (a ToolApprovalResponse's JSON) on a run waiting for ``pending``."""
    return Verdict(ToolApprovalResponse.model_validate(response), tuple(pending))


def approve(token: str = "v1.tok.en") -> dict[str, Any]:
    return {"approval_id": "ap1", "approved": True, "reason": None, "token": token}


def deny(reason: str | None = "no") -> dict[str, Any]:
    return {"approval_id": "ap1", "approved": False, "reason": reason, "token": None}


def test_a_verdict_is_recorded_while_the_run_waits(runtime_store: Any) -> None:
    waiting(runtime_store)
    stored, recorded = runtime_store.rt_verdict("r1", verdict(approve(), ["ap1"]), now=NOW + 5)
    assert recorded and stored.state == "pending" and stored.updated_at == NOW + 5
    assert {k: v.model_dump(mode="json") for k, v in stored.verdicts.items()} == {"ap1": approve()}
    assert stored.decided["ap1"].approved is True and stored.decided["ap1"].at == NOW + 5
    assert "v1.tok.en" not in str(stored.decided)  # a digest, not the token
    assert runtime_store.rt_get("r1") == stored


def test_the_run_waits_until_every_pending_approval_has_a_verdict(runtime_store: Any) -> None:
    waiting(runtime_store)
    first, _ = runtime_store.rt_verdict("r1", verdict(approve(), ["ap1", "ap2"]), now=NOW)
    assert first.state == "waiting_approval"
    second = {**deny(), "approval_id": "ap2"}
    last, recorded = runtime_store.rt_verdict("r1", verdict(second, ["ap1", "ap2"]), now=NOW)
    assert recorded and last.state == "pending" and set(last.verdicts) == {"ap1", "ap2"}


def test_a_second_verdict_loses_and_is_told_the_winner(runtime_store: Any) -> None:
    waiting(runtime_store)
    runtime_store.rt_verdict("r1", verdict(deny(), ["ap1"]), now=NOW)
    before = runtime_store.rt_get("r1")
    with pytest.raises(nd.ApprovalNotPendingError) as lost:
        runtime_store.rt_verdict("r1", verdict(approve(), ["ap1"]), now=NOW + 1)
    assert lost.value.verdict == "denied" and lost.value.approval_id == "ap1"
    assert "already denied" in str(lost.value)
    assert runtime_store.rt_get("r1") == before


def test_the_same_verdict_again_is_a_repeat_not_a_conflict(runtime_store: Any) -> None:
    waiting(runtime_store)
    first, _ = runtime_store.rt_verdict("r1", verdict(approve(), ["ap1"]), now=NOW)
    again, recorded = runtime_store.rt_verdict("r1", verdict(approve(), ["ap1"]), now=NOW + 9)
    assert not recorded and again == first == runtime_store.rt_get("r1")
    # an approval with another token is not the same verdict
    with pytest.raises(nd.ApprovalNotPendingError) as lost:
        runtime_store.rt_verdict("r1", verdict(approve("v1.other.token"), ["ap1"]), now=NOW)
    assert lost.value.verdict == "approved"
    # denials repeat whatever their reason
    waiting(runtime_store, "r2")
    runtime_store.rt_verdict("r2", verdict(deny("first"), ["ap1"]), now=NOW)
    _, recorded = runtime_store.rt_verdict("r2", verdict(deny("second"), ["ap1"]), now=NOW)
    assert not recorded and runtime_store.rt_get("r2").verdicts["ap1"].reason == "first"


def test_the_winner_is_remembered_after_the_run_moved_on(runtime_store: Any) -> None:
    waiting(runtime_store)
    runtime_store.rt_verdict("r1", verdict(approve(), ["ap1"]), now=NOW)
    # the next leg applied the verdict and the run waits for another approval now
    runtime_store.rt_update("r1", RunPatch(state="waiting_approval", verdicts={}))
    with pytest.raises(nd.ApprovalNotPendingError) as lost:
        runtime_store.rt_verdict("r1", verdict(deny(), ["ap2"]), now=NOW)
    assert lost.value.verdict == "approved"
    _, recorded = runtime_store.rt_verdict("r1", verdict(approve(), ["ap2"]), now=NOW)
    assert not recorded  # the winner's retry still gets its answer


def test_a_run_that_no_longer_waits_takes_no_verdict(runtime_store: Any) -> None:
    waiting(runtime_store)
    runtime_store.rt_update("r1", RunPatch(state="cancelled", reason="cancelled"))
    with pytest.raises(nd.ApprovalNotPendingError) as lost:
        runtime_store.rt_verdict("r1", verdict(approve(), ["ap1"]), now=NOW)
    assert lost.value.verdict is None and lost.value.state == "cancelled"
    assert "cancelled" in str(lost.value)
    assert runtime_store.rt_get("r1").verdicts == {}
    waiting(runtime_store, "r2")  # an approval the run does not wait for
    with pytest.raises(nd.ApprovalNotPendingError):
        runtime_store.rt_verdict(
            "r2", verdict({**approve(), "approval_id": "ap9"}, ["ap1"]), now=NOW
        )
    with pytest.raises(nd.RunNotFoundError):
        runtime_store.rt_verdict("nope", verdict(approve(), ["ap1"]), now=NOW)


def test_racing_handles_record_exactly_one_verdict(runtime_store: Any, reopen: Reopen) -> None:
    with handles(runtime_store, reopen) as racing:
        for round_ in range(10):
            run_id = f"race{round_}"
            waiting(runtime_store, run_id)

            def answer(i: int, run_id: str = run_id) -> Any:
                response = approve(f"v1.token.{i}") if i % 2 == 0 else deny(f"no {i}")
                try:
                    return racing[i].rt_verdict(run_id, verdict(response, ["ap1"]), now=NOW)[1]
                except nd.ApprovalNotPendingError as exc:
                    return exc

            results = in_threads(answer, len(racing), timeout=30)
            winners = [i for i, r in enumerate(results) if r is True]
            assert len(winners) == 1, results
            won = "approved" if winners[0] % 2 == 0 else "denied"
            for i, result in enumerate(results):
                if i == winners[0]:
                    continue
                if won == "denied" and i % 2 == 1:  # another denial: a repeat
                    assert result is False, results
                else:  # the other verdict, or an approval with another token: told what won
                    assert isinstance(result, nd.ApprovalNotPendingError), results
                    assert result.verdict == won
            record = runtime_store.rt_get(run_id)
            assert record.state == "pending" and record.decided["ap1"].approved == (
                won == "approved"
            )
