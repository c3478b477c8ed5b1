"""Who decided, shown: ``explain`` lines, the history frame's ``decided_by``/``via`` columns
and the events frame's summary of ``approval_resolved``."""

from __future__ import annotations

import re
from typing import Any

import nbdurable as nd
from nbdurable import inspect as ins
from nbdurable.runtime import Agent, DurableRuntime

from .conftest import TOOLS, script


def janitor() -> Agent:
    return Agent("janitor", nd.ScriptedModel(script()), TOOLS, version="1")


async def test_explain_and_the_frames_say_who_decided_and_how(runs_store: Any) -> None:
    async with DurableRuntime(store=runs_store, agents=[janitor()]) as runtime:
        run = await runtime.submit("janitor", "Clean up stale staging tables.")
        await run.wait("waiting_approval")
        [request] = await run.pending_approvals()
        await run.approve(by="ana", via="magic")
        await run.result()
    said = ins.explain(runs_store, run.run_id)
    [line] = [d for d in said.details if d.startswith(f"approval {request.approval_id}: ")]
    assert re.fullmatch(
        rf"approval {request.approval_id}: approved by ana \(claimed\), \d+ s after the request",
        line,
    ), line
    assert line in str(said)
    history = ins.history(runs_store, run.run_id)
    waited = history[history["pending_approvals"] > 0]
    assert list(waited["decided_by"]) == ["by ana (claimed)"]
    assert list(waited["via"]) == ["magic"]
    assert history[history["pending_approvals"] == 0]["decided_by"].isna().all()
    events = ins.events(runs_store, run.run_id)
    [summary] = events[events["type"] == "approval_resolved"]["summary"]
    assert summary.startswith(f"{request.approval_id} approved by ana (claimed)")


def test_a_verdict_line_for_every_kind_of_source() -> None:
    from nbdurable.runs import verdict_line

    lee = {"by": "lee", "authenticated": True, "via": "http"}
    assert verdict_line(True, lee, 125_000) == "approved by lee, 2 min after the request"
    link = {"by": None, "via": "link", "addressed_to": "lee"}
    assert verdict_line(False, link) == "denied via link addressed to lee"
    assert verdict_line(True, {"via": "link"}) == "approved via link"
    minted = {**link, "minted_by": "ana", "minted_via": "http"}
    assert verdict_line(True, minted) == "approved via link addressed to lee, minted by ana"
    claimed = {**minted, "minted_via": "api"}
    assert verdict_line(True, claimed).endswith("minted by ana (claimed)")
    sent = {**link, "minted_via": "notify"}
    assert verdict_line(True, sent) == "approved via link addressed to lee, sent by notification"
    unnamed = {"via": "link", "minted_via": "http"}
    assert verdict_line(True, unnamed) == "approved via link, minted with the unnamed token"
    assert verdict_line(True, {"via": "http"}) == "approved via http"
    grant = {"via": "grant", "grant_id": "grant_1"}
    assert verdict_line(True, grant) == "approved by standing grant grant_1"
    assert verdict_line(True, None, 3_000) == "approved, 3 s after the request"
    assert verdict_line(False, None) == "denied"
