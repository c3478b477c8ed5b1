"""Verdicts through the runtime API: one wins, the loser learns which; tokens expire at a max age.

The cross-process races are in test_verdict_races.py; these are the rules one
process can show: what the loser is told (``Run.approve``/``Run.deny`` raise
``ApprovalNotPendingError``, ``submit_verdict`` answers ``stale`` with the
winner), that the winner's repeat is the original success, and that a
genuine token past ``DurableRuntime(approval_max_age_ms=...)`` is refused on
every path while the request stays decidable with a freshly signed token.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.gated_janitor import gated, parked

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.runtime._checked_verdicts import submit_verdict

from .conftest import FakeClock

SECRET = "verdict test secret"
WEEK_MS = 7 * 24 * 3600 * 1000


def tool_result(store: Any, run_id: str) -> str:
    checkpoint = store.load(run_id)
    parts = [p for m in checkpoint.messages if m.role == "tool" for p in m.content]
    return str(parts[0].result)


async def test_the_loser_learns_the_winner_and_the_winner_may_repeat(store: Any) -> None:
    ran: list[str] = []
    async with await DurableRuntime.open(store=store, agents=[gated(ran)]) as rt:
        run, request = await parked(rt)
        await run.approve(request.approval_id)
        with pytest.raises(nd.ApprovalNotPendingError) as lost:
            await run.deny(request.approval_id, reason="too late")
        assert isinstance(lost.value, nd.DurableConflictError)
        assert lost.value.verdict == "approved" and lost.value.approval_id == request.approval_id
        assert "already approved" in str(lost.value)
        outcome = await submit_verdict(rt, run.run_id, request.approval_id, approve=False)
        assert (outcome.state, outcome.winner) == ("stale", "approved")
        assert not outcome.recorded and "approved" in outcome.message
        # the same verdict again (its token): the original success, not a conflict
        await run.approve(request.approval_id, token=request.token)
        again = await submit_verdict(
            rt, run.run_id, request.approval_id, approve=True, token=request.token
        )
        assert again.state == "approved"
        assert (await run.result()).text == "done"
    assert ran == ["stg"]


async def test_a_verdict_after_the_run_moved_on_names_the_winner(store: Any) -> None:
    ran: list[str] = []
    async with await DurableRuntime.open(store=store, agents=[gated(ran)]) as rt:
        run, request = await parked(rt)
        await run.deny(request.approval_id, reason="not today")
        await run.result()
        with pytest.raises(nd.ApprovalNotPendingError) as named:
            await run.approve(request.approval_id, token=request.token)
        assert named.value.verdict == "denied" and named.value.state == "completed"
        with pytest.raises(nd.ApprovalNotPendingError) as unnamed:
            await run.approve()  # no id: the verdict recorded last
        assert unnamed.value.approval_id == request.approval_id
        assert unnamed.value.verdict == "denied"
        await run.deny(request.approval_id)  # the winner's repeat
    assert ran == []


async def test_a_cancelled_run_takes_no_verdict(store: Any) -> None:
    ran: list[str] = []
    async with await DurableRuntime.open(store=store, agents=[gated(ran)]) as rt:
        run, request = await parked(rt)
        await run.cancel()
        with pytest.raises(nd.ApprovalNotPendingError) as lost:
            await run.approve(request.approval_id, token=request.token)
        assert lost.value.verdict is None and lost.value.state == "cancelled"
        outcome = await submit_verdict(
            rt, run.run_id, request.approval_id, approve=True, token=request.token
        )
        assert outcome.state == "stale" and outcome.winner is None
        with pytest.raises(nd.ConfigurationError):
            await (await parked(rt))[0].approve("approval_nope")
    assert ran == []


async def test_an_expired_token_is_refused_and_a_fresh_decision_succeeds(store: Any) -> None:
    clock = FakeClock()
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    ran: list[str] = []
    async with await DurableRuntime.open(
        store=store, agents=[gated(ran)], approval_signer=signer
    ) as rt:
        assert rt.approval_max_age_ms == WEEK_MS  # the default
        run, request = await parked(rt)
        # a correctly signed token, issued at the epoch
        ancient = nd.ApprovalSigner(SECRET, clock=FakeClock(0)).sign(
            request.model_copy(update={"token": None}), run_id=run.run_id
        )
        assert signer.verify(ancient) is not None  # genuine, only old
        with pytest.raises(nd.ApprovalExpiredError) as expired:
            await run.approve(request.approval_id, token=ancient)
        assert expired.value.max_age_ms == WEEK_MS and expired.value.age_ms == clock.t
        assert "still waits" in str(expired.value)
        outcome = await submit_verdict(
            rt, run.run_id, request.approval_id, approve=True, token=ancient
        )
        assert outcome.state == "expired" and not outcome.recorded
        # the run parks past the max age: its own token expires too
        clock.advance(WEEK_MS)
        with pytest.raises(nd.ApprovalExpiredError):
            await run.approve()  # echoes the request's token
        record = run.record()
        assert record.state == "waiting_approval" and record.verdicts == {} == record.decided
        # shown again, freshly signed: same request, same binding, issued now
        [again] = await run.pending_approvals()
        assert again.model_copy(update={"token": None}) == request.model_copy(
            update={"token": None}
        )
        payload = signer.verify(again.token, max_age_ms=WEEK_MS)
        assert payload is not None and payload["issued_at"] == clock.t
        assert payload["run_id"] == signer.verify(request.token)["run_id"]
        await run.approve(request.approval_id, token=again.token)
        assert (await run.result()).text == "done"
    assert ran == ["stg"]


async def test_a_denial_needs_no_fresh_token(store: Any) -> None:
    clock = FakeClock()
    ran: list[str] = []
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    async with await DurableRuntime.open(
        store=store, agents=[gated(ran)], approval_signer=signer, approval_max_age_ms=1000
    ) as rt:
        run, _ = await parked(rt)
        clock.advance(5000)
        await run.deny(reason="stale request")
        await run.result()
    assert ran == [] and "stale request" in tool_result(store, run.run_id)


async def test_no_max_age_accepts_any_genuine_token(store: Any) -> None:
    ran: list[str] = []
    signer = nd.ApprovalSigner(SECRET)
    async with await DurableRuntime.open(
        store=store, agents=[gated(ran)], approval_signer=signer, approval_max_age_ms=None
    ) as rt:
        run, request = await parked(rt)
        ancient = nd.ApprovalSigner(SECRET, clock=FakeClock(0)).sign(
            request.model_copy(update={"token": None}), run_id=run.run_id
        )
        await run.approve(request.approval_id, token=ancient)
        await run.result()
    assert ran == ["stg"]


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "7d"])
def test_the_max_age_must_be_a_positive_integer_or_none(bad: Any) -> None:
    with pytest.raises(nd.ConfigurationError, match="approval_max_age_ms"):
        DurableRuntime(store=nd.InMemorySessionStore(), approval_max_age_ms=bad)


@pytest.mark.spec("S000-50")
async def test_the_loop_functions_keep_no_age_limit_unless_set() -> None:
    """generate_text and resume verify tokens with no maximum age by default."""
    store = nd.InMemorySessionStore()
    ran: list[str] = []
    agent = gated(ran)
    signer = nd.ApprovalSigner(SECRET)
    first = await nd.generate_text(
        model=agent.model,
        messages="Clean up.",
        tools=list(agent.tool_map.values()),
        approval_signer=signer,
        session=nd.DurableSession(store, "loop-1"),
    )
    [request] = first.pending_approvals
    ancient = nd.ApprovalSigner(SECRET, clock=FakeClock(0)).sign(
        request.model_copy(update={"token": None}), run_id="loop-1"
    )
    response = nd.ToolApprovalResponse(
        approval_id=request.approval_id, approved=True, token=ancient
    )
    await nd.resume_from_checkpoint(
        store,
        "loop-1",
        model=agent.model,
        tools=list(agent.tool_map.values()),
        approval_signer=signer,
        approval_responses=[response],
    )
    assert ran == ["stg"]


async def test_a_request_signed_with_a_retired_key_can_only_be_denied(store: Any) -> None:
    ran: list[str] = []
    k1 = nd.ApprovalSigner(keys={"k1": SECRET})
    async with await DurableRuntime.open(
        store=store, agents=[gated(ran)], approval_signer=k1
    ) as rt:
        run, request = await parked(rt)
    k2_only = nd.ApprovalSigner(keys={"k2": "the new secret"})  # k1 retired
    async with await DurableRuntime.open(
        store=store, agents=[gated(ran)], approval_signer=k2_only
    ) as rt:
        run = await rt.get_run(run.run_id)
        [shown] = await run.pending_approvals()
        assert shown.token == request.token  # not signed anew: it no longer verifies
        # a token the current key signs for the same call (a link minted before the retirement)
        fresh = k2_only.sign(request.model_copy(update={"token": None}), run_id=run.run_id)
        outcome = await submit_verdict(
            rt, run.run_id, request.approval_id, approve=True, token=fresh
        )
        assert outcome.state == "invalid token" and "can only be denied" in outcome.message
        assert run.record().decided == {} and run.record().state == "waiting_approval"
        # run.approve (echoing the k1 token) is refused too: nothing recorded
        with pytest.raises(nd.ConfigurationError, match="can only be denied"):
            await run.approve(request.approval_id)
        assert run.record().decided == {} and run.record().state == "waiting_approval"
        await run.deny(request.approval_id, reason="k1 retired")
        assert (await run.result()).text == "done"
        assert run.record().decided[request.approval_id].approved is False
    assert ran == []
