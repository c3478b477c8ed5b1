"""Standing approvals on the embedded engine: a grant approves a tool's calls in one run.

Covered calls run with no request and no wait, each ``approval_resolved`` naming
the grant; calls it does not cover (other arguments, another agent path, after
expiry or revocation, a forged token in the record) wait for a human as usual.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from support.waiting import result_within

import nbdurable as nd
from nbdurable.messages import VerdictSource
from nbdurable.models._base import ModelRequest
from nbdurable.runs import sign_grant
from nbdurable.runtime import Agent, DurableRuntime

from .conftest import FakeClock, GatedModel

TIMEOUT = 30


def _drop_table(dropped: list[str]) -> nd.Tool:
    @nd.tool(needs_approval=True)
    def drop_table(name: str) -> str:
        """Drop a table."""
        dropped.append(name)
        return f"dropped {name}"

    return drop_table


def _drops(*names: str) -> nd.Turn:
    return nd.Turn(tool_calls=[("drop_table", {"name": n}) for n in names])


async def _events(store: Any, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.payload for e in await nd.read_events(store, run_id) if e.type == kind]


def _source(by: str, grant_id: str) -> dict[str, Any]:
    """A covered call's recorded verdict source."""
    return VerdictSource(by=by, via="grant", grant_id=grant_id).model_dump(mode="json")


def _sqlite(tmp_path: Any) -> Any:
    return nd.open_store(f"sqlite:///{tmp_path}/runs.db")


async def test_a_grant_runs_every_matching_call_without_a_wait(
    store: Any, reopen: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBDURABLE_USER", "ana")
    dropped: list[str] = []
    gate = asyncio.Event()
    model = GatedModel([_drops("stg_a"), _drops("stg_b", "stg_c"), "cleaned up"], gate=gate)
    agent = Agent("dba", model, [_drop_table(dropped)], version="1")
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("dba", "Clean up the staging tables.")
        grant = await run.grant("drop_table", minutes=30, match={"name": "stg_*"})
        gate.set()
        result = await result_within(run, TIMEOUT)  # once not in 30 s in CI, on PostgreSQL
    assert result.text == "cleaned up"
    assert dropped[0] == "stg_a" and sorted(dropped[1:]) == [
        "stg_b",
        "stg_c",
    ]  # a step's calls run at once
    assert grant.granted_by == "ana" and grant.via == "api" and grant.tool == "drop_table"
    assert grant.match == {"name": {"glob": "stg_*"}} and grant.agent_path == ()
    assert await _events(store, run.run_id, "tool_approval_request") == []
    resolved = await _events(store, run.run_id, "approval_resolved")
    assert len(resolved) == 3
    for payload in resolved:
        assert payload["approved"] is True
        assert payload["source"] == _source("ana", grant.grant_id)
    [added] = await _events(store, run.run_id, "grant_added")
    assert added == {
        "grant_id": grant.grant_id,
        "tool": "drop_table",
        "expires_at": grant.expires_at,
        "match": {"name": {"glob": "stg_*"}},
        "agent_path": [],
        "granted_by": "ana",
        "via": "api",
    }
    # the token rides the run record, which any process reads
    record = reopen(store).rt_get(run.run_id)
    assert record.grants == {"tokens": [grant.token], "revoked": []}


async def test_a_call_whose_arguments_do_not_match_waits(tmp_path: Any) -> None:
    dropped: list[str] = []
    gate = asyncio.Event()
    model = GatedModel([_drops("stg_a", "prod_orders"), "done"], gate=gate)
    agent = Agent("dba", model, [_drop_table(dropped)], version="1")
    store = _sqlite(tmp_path)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("dba", "Clean up.")
        await run.grant("drop_table", match={"name": {"prefix": "stg_"}})
        gate.set()
        await run.wait("waiting_approval", timeout=TIMEOUT)
        [request] = await run.pending_approvals()
        assert request.input == {"name": "prod_orders"}
        assert dropped == []  # nothing in a step that waits runs before the human answers
        await run.approve(request.approval_id)
        await asyncio.wait_for(run.result(), TIMEOUT)
    assert sorted(dropped) == ["prod_orders", "stg_a"]
    resolved = await _events(store, run.run_id, "approval_resolved")
    # the covered call was gated again as the step settled: one verdict each
    by_call = {p["tool_call_id"]: (p.get("source") or {}).get("via") for p in resolved}
    assert len(resolved) == len(by_call) == 2
    assert sorted(v == "grant" for v in by_call.values()) == [False, True]
    store.close()


async def test_an_expired_grant_stops_covering_at_once(tmp_path: Any) -> None:
    clock = FakeClock()
    dropped: list[str] = []

    def later(request: ModelRequest) -> nd.Turn:
        clock.advance(60_000)  # the grant (60 s) expires before the model answers
        return _drops("stg_b")

    gate = asyncio.Event()
    model = GatedModel([_drops("stg_a"), later, "done"], gate=gate)
    agent = Agent("dba", model, [_drop_table(dropped)], version="1")
    store = _sqlite(tmp_path)
    async with await DurableRuntime.open(
        store=store, agents=[agent], deps=nd.Deps(clock=clock)
    ) as rt:
        run = await rt.submit("dba", "Clean up.")
        grant = await run.grant("drop_table", seconds=60)
        assert grant.expires_at == clock.now() + 60_000
        gate.set()
        await run.wait("waiting_approval", timeout=TIMEOUT)
        [request] = await run.pending_approvals()
        assert request.input == {"name": "stg_b"}
        assert dropped == ["stg_a"]
        await run.cancel()
    store.close()


async def test_a_revoked_grant_covers_no_further_call(store: Any) -> None:
    dropped: list[str] = []
    entered, release = asyncio.Event(), asyncio.Event()

    @nd.tool
    async def inspect_tables() -> str:
        """Look at the tables."""
        entered.set()
        await release.wait()
        return "stg_a, stg_b"

    gate = asyncio.Event()
    model = GatedModel(
        [_drops("stg_a"), nd.Turn.call("inspect_tables"), _drops("stg_b"), "done"], gate=gate
    )
    agent = Agent(
        "dba",
        model,
        [_drop_table(dropped), inspect_tables],
        version="1",
        tool_recovery={"inspect_tables": "safe"},
    )
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("dba", "Clean up.")
        grant = await run.grant("drop_table")
        gate.set()
        await asyncio.wait_for(entered.wait(), TIMEOUT)
        await run.revoke(grant.grant_id)  # while the leg runs
        await run.revoke(grant.grant_id)  # twice: a no-op
        release.set()
        await run.wait("waiting_approval", timeout=TIMEOUT)
        [request] = await run.pending_approvals()
        assert request.input == {"name": "stg_b"}
        assert dropped == ["stg_a"]
        await run.deny(request.approval_id, reason="not now")
        await asyncio.wait_for(run.result(), TIMEOUT)
    assert run.record().grants == {"tokens": [grant.token], "revoked": [grant.grant_id]}
    [revoked] = await _events(store, run.run_id, "grant_revoked")
    assert revoked["grant_id"] == grant.grant_id and revoked["via"] == "api"


@pytest.mark.parametrize("path", [(), ("coder",)])
async def test_a_grant_covers_a_sub_agents_calls_only_when_it_names_its_path(
    tmp_path: Any, path: tuple[str, ...]
) -> None:
    dropped: list[str] = []
    drop_table = _drop_table(dropped)
    coder = nd.agent_tool(
        "coder", model=nd.ScriptedModel([_drops("stg_a"), "coder done"]), tools=[drop_table]
    )
    gate = asyncio.Event()
    parent = GatedModel(
        [nd.Turn(tool_calls=[{"name": "coder", "args": {"prompt": "x"}, "id": "c1"}]), "done"],
        gate=gate,
    )
    agent = Agent("lead", parent, [coder, drop_table], version="1", tool_recovery={"coder": "safe"})
    store = _sqlite(tmp_path)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("lead", "Have the coder clean up.")
        grant = await run.grant("drop_table", agent_path=path)
        gate.set()
        if path:
            await asyncio.wait_for(run.result(), TIMEOUT)
            assert dropped == ["stg_a"]
            logs = (run.run_id, f"{run.run_id}::coder#c1")  # the sub-agent's own log
            resolved = [p for log in logs for p in await _events(store, log, "approval_resolved")]
            assert [p["source"]["grant_id"] for p in resolved] == [grant.grant_id]
        else:
            await run.wait("waiting_approval", timeout=TIMEOUT)
            [request] = await run.pending_approvals()
            assert request.agent_path == ("coder",)
            assert dropped == []
            await run.cancel()
    store.close()


@pytest.mark.parametrize("forgery", ["other key", "edited rule", "other run"])
async def test_a_forged_grant_in_the_record_is_not_honoured(tmp_path: Any, forgery: str) -> None:
    dropped: list[str] = []
    gate = asyncio.Event()
    model = GatedModel([_drops("prod_orders"), "done"], gate=gate)
    agent = Agent("dba", model, [_drop_table(dropped)], version="1")
    store = _sqlite(tmp_path)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("dba", "Clean up.")
        fields: dict[str, Any] = {
            "grant_id": "grant_forged",
            "run_id": run.run_id,
            "tool": "drop_table",
            "expires_at": rt.now() + 3_600_000,
        }
        if forgery == "other key":
            token = sign_grant(nd.ApprovalSigner("not the runtime's secret"), **fields).token
        elif forgery == "other run":
            token = sign_grant(rt.signer, **{**fields, "run_id": "another-run"}).token
        else:  # a genuine narrow grant whose rule was edited to match everything
            genuine = sign_grant(rt.signer, **fields, match={"name": "stg_*"}).token
            prefix, _, mac = genuine.split(".")
            edited = sign_grant(rt.signer, **fields).token.split(".")[1]
            token = f"{prefix}.{edited}.{mac}"
        rt.runtime_store.rt_grants(run.run_id, add=token, now=rt.now())
        gate.set()
        await run.wait("waiting_approval", timeout=TIMEOUT)
        assert dropped == []
        await run.cancel()
    store.close()


async def test_a_grant_approves_the_calls_the_run_waits_on(tmp_path: Any) -> None:
    dropped: list[str] = []
    model = nd.ScriptedModel([_drops("stg_a"), "done"])
    agent = Agent("dba", model, [_drop_table(dropped)], version="1")
    store = _sqlite(tmp_path)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("dba", "Clean up.")
        await run.wait("waiting_approval", timeout=TIMEOUT)
        [request] = await run.pending_approvals()
        grant = await run.grant("drop_table", match={"name": "stg_*"}, by="lee", via="magic")
        result = await asyncio.wait_for(run.result(), TIMEOUT)
    assert result.text == "done" and dropped == ["stg_a"]
    source = _source("lee", grant.grant_id)
    assert run.record().decided[request.approval_id].source.model_dump(mode="json") == source
    [resolved] = await _events(store, run.run_id, "approval_resolved")
    assert resolved["approval_id"] == request.approval_id
    assert resolved["source"] == source
    store.close()


async def test_bad_grants_and_revocations_are_configuration_errors(tmp_path: Any) -> None:
    agent = Agent("dba", nd.ScriptedModel(["done"]), [_drop_table([])], version="1")
    store = _sqlite(tmp_path)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run = await rt.submit("dba", "Hi.")
        await asyncio.wait_for(run.result(), TIMEOUT)
        with pytest.raises(nd.ConfigurationError, match="completed"):
            await run.grant("drop_table")
        other = await rt.submit("dba", "Again.", session_id="second")
        with pytest.raises(nd.ConfigurationError, match="no tool"):
            await other.grant("drop_everything")
        with pytest.raises(nd.ConfigurationError):
            await other.grant("drop_table", minutes=0)
        with pytest.raises(nd.ConfigurationError):
            await other.grant("drop_table", minutes=1, seconds=5)
        with pytest.raises(nd.ConfigurationError):
            await other.grant("drop_table", match={"name": {"regex": ".*"}})
        with pytest.raises(nd.ConfigurationError):
            await other.grant("drop_table", agent_path="coder")
        with pytest.raises(nd.ConfigurationError, match="no grant"):
            await other.revoke("grant_unknown")
    store.close()


async def test_only_someone_who_may_decide_a_tool_may_grant_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    dropped: list[str] = []
    model = GatedModel([_drops("stg_a"), "cleaned up"], gate=asyncio.Event())
    agent = Agent(
        "dba", model, [_drop_table(dropped)], version="1", approvers={"drop_table": ["lee"]}
    )
    store = _sqlite(tmp_path)
    try:
        async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
            run = await rt.submit("dba", "Clean up the staging tables.")
            monkeypatch.setenv("NBDURABLE_USER", "ana")
            with pytest.raises(nd.ApproverNotAllowedError):
                await run.grant("drop_table", minutes=5)
            assert run.record().grants is None
            assert await _events(store, run.run_id, "grant_added") == []
            grant = await run.grant("drop_table", minutes=5, by="lee")
            assert grant.granted_by == "lee"
            await run.cancel()
    finally:
        store.close()
