"""Who decided, and who may: every verdict records its source; the agent's rule is enforced.

``Run.approve``/``deny`` record the claimed name (``by``, else ``NBDURABLE_USER``,
else the OS user) as not authenticated, on the record's ``decided`` entry and on
the ``approval_resolved`` event. ``Agent(approvers=...)`` is saved in the run
record at submission, so a process without the agent (a second store handle
here) enforces it too; ``submitter_may_approve=False`` keeps the submitter from
approving.
"""

from __future__ import annotations

import getpass
from typing import Any

import pytest
from support.gated_janitor import gated

import nbdurable as nd
from nbdurable.messages import VerdictSource
from nbdurable.runs import RuntimeRun
from nbdurable.runtime import DurableRuntime
from nbdurable.runtime._checked_verdicts import submit_verdict
from nbdurable.runtime._run import Run


async def parked(rt: DurableRuntime, **submit: Any) -> tuple[Run, nd.ToolApprovalRequest]:
    run = await rt.submit("janitor", "Clean up.", **submit)
    await run.wait("waiting_approval")
    [request] = await run.pending_approvals()
    return run, request


def resolved_source(store: Any, run_id: str) -> dict[str, Any] | None:
    events = store.read_events(run_id)
    [event] = [e for e in events if e.type == "approval_resolved"]
    source: dict[str, Any] | None = event.payload.get("source")
    return source


async def test_an_api_verdict_records_the_claimed_user(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBDURABLE_USER", "ana")
    ran: list[str] = []
    async with await DurableRuntime.open(store=store, agents=[gated(ran)]) as rt:
        run, request = await parked(rt)
        assert run.record().submitted_by == "ana"
        await run.approve()
        assert (await run.result()).text == "done"
        entry = run.record().decided[request.approval_id]
    expected = {"by": "ana", "authenticated": False, "via": "api"}
    assert {k: entry.source.model_dump(mode="json")[k] for k in expected} == expected
    assert resolved_source(store, run.run_id) == {**entry.source.model_dump(mode="json")}
    assert ran == ["stg"]


async def test_without_a_name_set_the_os_user_is_claimed(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NBDURABLE_USER", raising=False)
    async with await DurableRuntime.open(store=store, agents=[gated([])]) as rt:
        run, request = await parked(rt)
        await run.deny(reason="not today", via="magic")
        await run.result()
        source = run.record().decided[request.approval_id].source.model_dump(mode="json")
    assert source["by"] == getpass.getuser() and source["via"] == "magic"
    assert run.record().submitted_by == getpass.getuser()


async def test_a_name_outside_the_approvers_is_refused_and_nothing_is_recorded(
    store: Any, reopen: Any
) -> None:
    ran: list[str] = []
    agent = gated(ran, approvers={"drop_table": ["ana", "lee"]})
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run, request = await parked(rt)
        assert run.record().approvers == {"drop_table": ["ana", "lee"]}
        with pytest.raises(nd.ApproverNotAllowedError) as refused:
            await run.approve(by="bob")
        assert isinstance(refused.value, nd.NbdurableError)
        assert isinstance(refused.value, PermissionError)
        assert refused.value.allowed == ("ana", "lee") and refused.value.principal == "bob"
        assert "'bob' may not decide" in str(refused.value)
        with pytest.raises(nd.ApproverNotAllowedError):
            await run.deny(by="bob", reason="no")
        assert run.record().state == "waiting_approval" and not run.record().decided
        # a widget's verdict is refused the same way, and says so on the card
        outcome = await submit_verdict(
            rt,
            run.run_id,
            request.approval_id,
            approve=True,
            token=request.token,
            source=VerdictSource(by="bob", via="widget"),
        )
        assert outcome.state == "not allowed" and not outcome.recorded
        assert "only ana, lee may" in outcome.message
        # a process that never saw the agent (the rule is in the record) lets lee decide
        async with await DurableRuntime.open(store=reopen(store), agents=[]) as other:
            await Run(other, run.run_id).approve(by="lee", via="cli")
        assert (await run.result()).text == "done"
        source = run.record().decided[request.approval_id].source.model_dump(mode="json")
    assert (source["by"], source["via"], source["authenticated"]) == ("lee", "cli", False)
    assert ran == ["stg"]


async def test_the_submitter_may_deny_but_not_approve_when_the_agent_says_so(
    store: Any,
) -> None:
    agent = gated([], submitter_may_approve=False)
    async with await DurableRuntime.open(store=store, agents=[agent]) as rt:
        run, _ = await parked(rt, submitted_by="ana")
        with pytest.raises(nd.ApproverNotAllowedError, match="submitted run"):
            await run.approve(by="ana")
        await run.approve(by="lee")
        assert (await run.result()).text == "done"
        second, request = await parked(rt, submitted_by="ana")
        await second.deny(by="ana", reason="changed my mind")
        await second.result()
        assert second.record().decided[request.approval_id].approved is False


@pytest.mark.parametrize(
    ("approvers", "match"),
    [
        ({"truncate": ["ana"]}, "not one of its tools"),
        ({"drop_table": []}, "non-empty list"),
        ({"drop_table": "ana"}, "non-empty list"),
        ({"drop_table": ["ana", " "]}, "not a nonblank name"),
        (["drop_table"], "must map tool names"),
    ],
)
def test_a_bad_approvers_rule_is_a_configuration_error(approvers: Any, match: str) -> None:
    with pytest.raises(nd.ConfigurationError, match=match):
        gated([], approvers=approvers).validate()


async def test_a_bad_by_or_via_is_a_configuration_error(store: Any) -> None:
    async with await DurableRuntime.open(store=store, agents=[gated([])]) as rt:
        run, _ = await parked(rt)
        with pytest.raises(nd.ConfigurationError, match="by must be"):
            await run.approve(by="  ")
        with pytest.raises(nd.ConfigurationError, match="via must be one of"):
            await run.approve(via="fax")
        assert not run.record().decided
        with pytest.raises(nd.ConfigurationError, match="submitted_by must be"):
            await rt.submit("janitor", "Again.", submitted_by=" ")


def _reserved(approvers: dict[str, list[str]] | None) -> RuntimeRun:
    return RuntimeRun(
        run_id="run-1",
        agent_id="janitor",
        agent_version="1",
        state="waiting_approval",
        session_id="s-1",
        prompt='"Go."',
        created_at=0,
        updated_at=0,
        approvers=approvers,
    )


def test_only_an_approver_mints_a_link_for_a_reserved_call() -> None:
    from nbdurable.runs import check_minter

    record = _reserved({"drop_table": ["ana", "lee"]})

    def mint(by: str | None, via: str = "http", to: str | None = None) -> str | None:
        return check_minter(record, "a1", "drop_table", minted_by=by, via=via, to=to)

    assert mint("ana") == "ana"  # addressed to the minter by default
    assert mint("ana", to="lee") == "lee"  # or to another approver
    assert mint("lee", via="api") == "lee"
    assert mint(None, via="notify", to="ana") == "ana"  # the notifier addresses approvers
    for by, via, to in (("bob", "http", "ana"), (None, "http", "ana"), ("bob", "api", None)):
        with pytest.raises(nd.ApproverNotAllowedError, match="may not mint a link") as refused:
            mint(by, via, to)
        assert refused.value.allowed == ("ana", "lee") and refused.value.principal == by
    for by, via, to in (("ana", "http", "bob"), (None, "notify", "bob"), (None, "notify", None)):
        with pytest.raises(nd.ApproverNotAllowedError, match="addressed only to ana, lee"):
            mint(by, via, to)
    # another tool's calls, or a run without approvers: anyone, addressed as asked
    assert check_minter(record, "a1", "lookup", minted_by=None, via="http") is None
    open_run = _reserved(None)
    assert check_minter(open_run, "a1", "drop_table", minted_by="bob", via="api", to="x") == "x"
    with pytest.raises(nd.ConfigurationError, match="minted via one of"):
        mint("ana", via="carrier pigeon")


def test_a_link_verdict_on_a_reserved_call_needs_an_approver_as_its_minter() -> None:
    from nbdurable.runs import check_decider

    record = _reserved({"drop_table": ["ana"]})

    def decide(**source: Any) -> None:
        link = VerdictSource(via="link", addressed_to="ana", **source)
        check_decider(record, "a1", "drop_table", link, approved=True)

    decide(minted_by="ana", minted_via="http")
    decide(minted_by="ana", minted_via="api")
    decide(minted_via="notify")
    for source, why in (
        ({"minted_by": "lee", "minted_via": "http"}, "minted by 'lee', who is not"),
        ({"minted_via": "http"}, "minted by the unnamed token"),
        ({}, "names no minter"),
    ):
        with pytest.raises(nd.ApproverNotAllowedError, match=why):
            decide(**source)
    # a call no approvers reserve: any link decides, as before
    check_decider(record, "a1", "lookup", VerdictSource(via="link"), approved=True)
