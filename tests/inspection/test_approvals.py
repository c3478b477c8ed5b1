"""``inspect.approvals``: every approval request of a store, with its verdict (the inbox)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from support.lead_agents import lead_with_coder

import nbdurable as nd
from nbdurable import inspect as ins
from nbdurable.inspect._approvals import APPROVAL_MAX_AGE_MS, approval_rows
from nbdurable.messages import ToolApprovalResponse
from nbdurable.runs import Verdict
from nbdurable.runtime import Agent, DurableRuntime
from nbdurable.runtime._options import APPROVAL_MAX_AGE_MS as RUNTIME_MAX_AGE_MS

from .conftest import TOOLS, make_run, script


def janitor(name: str = "janitor", turns: list[Any] | None = None) -> Agent:
    return Agent(name, nd.ScriptedModel(turns or script()), TOOLS, version="1")


def two_drops() -> list[Any]:
    """One turn with two gated calls: the run waits for two approvals at once."""
    return [
        nd.Turn(
            tool_calls=[
                {"name": "drop_table", "args": {"name": "stg_a"}, "id": "c1"},
                {"name": "drop_table", "args": {"name": "stg_b"}, "id": "c2"},
            ]
        ),
        "Dropped what I was allowed to.",
    ]


def test_the_inbox_default_max_age_is_the_runtimes() -> None:
    assert APPROVAL_MAX_AGE_MS == RUNTIME_MAX_AGE_MS


async def test_every_status_across_runs_of_a_runtime(runs_store: Any) -> None:
    agents = [janitor(), janitor("pair", two_drops())]
    async with DurableRuntime(store=runs_store, agents=agents) as runtime:
        approved = await runtime.submit("janitor", "Clean up.")
        denied = await runtime.submit("janitor", "Clean up.", session_id="s2")
        waiting = await runtime.submit("janitor", "Clean up.", session_id="s3")
        cancelled = await runtime.submit("janitor", "Clean up.", session_id="s4")
        pair = await runtime.submit("pair", "Drop both.", session_id="s5")
        for run in (approved, denied, waiting, cancelled, pair):
            await run.wait("waiting_approval")
        await approved.approve()
        await denied.deny(reason="not today")
        await cancelled.cancel()
        await cancelled.wait("cancelled")
        first, second = await pair.pending_approvals()
        await pair.deny(first.approval_id, reason="keep a")
        await approved.wait("completed")
        await denied.wait("completed")
        (asked,) = await waiting.pending_approvals()
        issued = runtime.signer.verify(asked.token)["issued_at"]

        frame = ins.approvals(runs_store, now=issued + 60_000)
        assert list(frame.columns[:7]) == [
            "run_id",
            "agent_path",
            "tool",
            "arguments",
            "edited_arguments",  # beside the model's: what a human changed them to
            "requested_at",
            "status",
        ]
        assert frame.index.name == "approval_id"
        by_run = {row.run_id: row for row in frame.itertuples() if row.run_id != pair.run_id}
        assert by_run[approved.run_id].status == "approved"
        assert by_run[denied.run_id].status == "denied"
        assert by_run[denied.run_id].reason == "not today"
        assert by_run[waiting.run_id].status == "pending"
        assert by_run[cancelled.run_id].status == "cancelled"
        assert by_run[waiting.run_id].tool == "drop_table"
        assert by_run[waiting.run_id].arguments == {"name": "stg_2023"}
        assert by_run[waiting.run_id].agent_path == ""
        # a pending request waited until "now"; a decided one until its verdict
        assert by_run[waiting.run_id].waited >= pd.Timedelta(seconds=59)
        assert isinstance(by_run[approved.run_id].waited, pd.Timedelta)
        decided = by_run[approved.run_id]
        assert decided.decided_at >= decided.requested_at
        assert decided.waited == decided.decided_at - decided.requested_at
        assert pd.isna(by_run[waiting.run_id].decided_at)
        assert isinstance(frame["requested_at"].dtype, pd.DatetimeTZDtype)

        # a run with two approvals: one denied, one still pending
        both = frame[frame["run_id"] == pair.run_id]
        assert dict(zip(both.index, both["status"], strict=True)) == {
            first.approval_id: "denied",
            second.approval_id: "pending",
        }
        assert sorted(both["arguments"].map(lambda a: a["name"])) == ["stg_a", "stg_b"]

        # past the token age: expired, still listed as waiting
        old = ins.approvals(runs_store, now=issued + APPROVAL_MAX_AGE_MS + 60_000, status="expired")
        assert set(old["run_id"]) == {waiting.run_id, pair.run_id}
        assert set(ins.approvals(runs_store, now=issued + 10**12, max_age_ms=None)["status"]) >= {
            "pending"
        }
        # and the waiting run is still decidable: a fresh token is signed for it
        (fresh,) = await waiting.pending_approvals()
        assert fresh.approval_id == asked.approval_id

        pending = ins.approvals(runs_store, status="pending", now=issued + 60_000)
        assert set(pending["run_id"]) == {waiting.run_id, pair.run_id}
        some = ins.approvals(runs_store, status=["approved", "denied"])
        assert set(some["status"]) == {"approved", "denied"} and len(some) == 3
        one = ins.approvals(runs_store, run_id=cancelled.run_id)
        assert list(one["status"]) == ["cancelled"]
        assert one["waited"].iloc[0] >= pd.Timedelta(0)

        await waiting.cancel()
        await pair.cancel()


async def test_who_decided_is_read_from_the_recorded_source(runs_store: Any) -> None:
    async with DurableRuntime(store=runs_store, agents=[janitor()]) as runtime:
        run = await runtime.submit("janitor", "Clean up.")
        await run.wait("waiting_approval")
        (request,) = await run.pending_approvals()
        source = {"by": "ana", "authenticated": True, "via": "http"}
        response = {
            "approval_id": request.approval_id,
            "approved": True,
            "token": request.token,
            "source": source,
        }
        runtime.runtime_store.rt_verdict(
            run.run_id,
            Verdict(ToolApprovalResponse.model_validate(response), (request.approval_id,)),
            now=runtime.now(),
        )
        runtime.wake()
        await run.wait("completed")
        (row,) = approval_rows(runs_store, run_id=run.run_id)
        assert (row["status"], row["decided_by"], row["authenticated"], row["via"]) == (
            "approved",
            "ana",
            True,
            "http",
        )
        assert row["addressed_to"] is None and row["grant_id"] is None
        assert row["agent_path"] == ()
        assert row["waited"] == row["decided_at"] - row["requested_at"]

        other = await runtime.submit("janitor", "Clean up.", session_id="s2")
        await other.wait("waiting_approval")
        await other.approve(by="lee")  # the API records a claimed name
        await other.wait("completed")
        (plain,) = approval_rows(runs_store, run_id=other.run_id)
        assert plain["status"] == "approved"
        assert (plain["decided_by"], plain["authenticated"], plain["via"]) == ("lee", False, "api")


async def test_a_sub_agents_request_names_its_agent_path(runs_store: Any) -> None:
    async with DurableRuntime(store=runs_store, agents=[lead_with_coder()]) as runtime:
        run = await runtime.submit("lead", "Have the coder test it.")
        await run.wait("waiting_approval")
        (row,) = approval_rows(runs_store, status="pending")
        assert (row["run_id"], row["agent_path"], row["tool"]) == (
            run.run_id,
            ("coder",),
            "run_shell",
        )
        frame = ins.approvals(runs_store)
        assert list(frame["agent_path"]) == ["coder"]  # one row: not again for the child's key
        await run.approve()
        await run.wait("completed")
        (done,) = approval_rows(runs_store)
        assert (done["status"], done["agent_path"]) == ("approved", ("coder",))


async def test_a_session_store_without_run_records_reads_checkpoints_and_events(
    any_store: Any,
) -> None:
    signer = nd.ApprovalSigner("test-secret")
    await make_run(any_store, "yes", approve=True, signer=signer)
    await make_run(any_store, "no", approve=False, signer=signer)
    await make_run(any_store, "open", approve=None, signer=signer)
    rows = {row["run_id"]: row for row in approval_rows(any_store)}
    assert rows["yes"]["status"] == "approved"
    assert rows["no"]["status"] == "denied" and rows["no"]["reason"] == "not today"
    assert rows["open"]["status"] == "pending"
    assert rows["yes"]["decided_at"] is not None
    assert rows["yes"]["tool"] == "drop_table"
    assert rows["open"]["arguments"] == {"name": "stg_2023"}
    assert [r["run_id"] for r in approval_rows(any_store, status="pending")] == ["open"]
    expired = approval_rows(any_store, now=rows["open"]["requested_at"] + APPROVAL_MAX_AGE_MS)
    assert {r["run_id"]: r["status"] for r in expired}["open"] == "expired"


def test_a_bad_status_or_an_unknown_run_is_refused(any_store: Any) -> None:
    with pytest.raises(nd.ConfigurationError, match="unknown approval status 'waiting'"):
        ins.approvals(any_store, status="waiting")
    with pytest.raises(nd.ConfigurationError):
        approval_rows(any_store, status=["pending", "nope"])
    with pytest.raises(nd.ConfigurationError):
        approval_rows(any_store, status=[])
    with pytest.raises(nd.RunNotFoundError):
        ins.approvals(any_store, run_id="missing")
    empty = ins.approvals(any_store)
    assert empty.empty and "status" in empty.columns


class CountingStore(nd.InMemorySessionStore):
    """An in-memory store that counts the event-log reads."""

    reads = 0

    def read_events(self, run_id: str, after: int = 0, limit: int | None = None) -> Any:
        CountingStore.reads += 1
        return super().read_events(run_id, after, limit)


async def test_run_records_and_checkpoints_suffice_without_reading_event_logs() -> None:
    store = CountingStore()
    async with DurableRuntime(store=store, agents=[janitor()]) as runtime:
        done = await runtime.submit("janitor", "Clean up.")
        waiting = await runtime.submit("janitor", "Clean up.", session_id="s2")
        await done.wait("waiting_approval")
        await waiting.wait("waiting_approval")
        await done.approve()
        await done.wait("completed")
        CountingStore.reads = 0
        rows = approval_rows(store)
        assert sorted(r["status"] for r in rows) == ["approved", "pending"]
        assert CountingStore.reads == 0
        await waiting.cancel()


async def test_calls_a_standing_grant_covered_are_rows_approved_via_the_grant(
    runs_store: Any,
) -> None:
    again = nd.Turn.call("drop_table", "And stg_2024.", name="stg_2024")
    async with DurableRuntime(store=runs_store, agents=[janitor("twice", script(again))]) as rt:
        run = await rt.submit("twice", "Clean up.")
        await run.wait("waiting_approval")
        grant = await run.grant("drop_table", minutes=5, by="ana")
        await run.wait("completed")
    rows = approval_rows(runs_store, status=["approved", "denied"])
    assert [(r["tool"], r["arguments"], r["status"]) for r in rows] == [
        ("drop_table", {"name": "stg_2023"}, "approved"),
        ("drop_table", {"name": "stg_2024"}, "approved"),
    ]
    assert {(r["via"], r["grant_id"], r["decided_by"]) for r in rows} == {
        ("grant", grant.grant_id, "ana")
    }
