"""Edits and replies over real HTTP: the bridge's verdict route and the approval link.

An approval may carry edited ``arguments`` (the token is the call's own,
unchanged; a tool that allows no edits, or arguments that do not fit, are a 422
and change nothing); a denial may carry a ``reply``, the call's result. The
link's page offers an edit box only for a tool that allows edits, and a Reply
field always; its buttons are clicked in headless Chromium.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbdurable.server import approval_link

from .harness import Server
from .test_approval_links import CHROMIUM, CHROMIUM_ARGS


def _waiting(server: Server, agent: str) -> tuple[str, dict[str, Any]]:
    with server.client() as http:
        run_id = http.post("/runs", json={"agent": agent, "prompt": "Clean up."}).json()["run_id"]
        server.wait_state(run_id, "waiting_approval")
        [approval] = http.get(f"/runs/{run_id}/approvals").json()
    return run_id, approval


def _verdict(server: Server, run_id: str, approval_id: str, **body: Any) -> Any:
    with server.client() as http:
        return http.post(f"/runs/{run_id}/approvals/{approval_id}", json=body)


def test_an_approval_with_edited_arguments_runs_them(server: Server) -> None:
    run_id, approval = _waiting(server, "editor")
    assert approval["allow_edit"] is True
    assert set(approval["parameters"]["properties"]) == {"name", "cascade"}
    approval_id, token = approval["approval_id"], approval["token"]
    refused = [
        _verdict(server, run_id, approval_id, approve=True, token=token, arguments={"name": 1}),
        _verdict(server, run_id, approval_id, approve=True, token=token, arguments={"x": "y"}),
        _verdict(server, run_id, approval_id, approve=False, arguments={"name": "a"}),
    ]
    assert [r.status_code for r in refused] == [422, 422, 422], [r.text for r in refused]
    assert refused[0].json()["error"]["type"] == "InvalidEditError"
    assert server.record(run_id).verdicts == {}  # nothing recorded: it still waits
    edited = {"name": "stg_2022", "cascade": True}
    response = _verdict(server, run_id, approval_id, approve=True, token=token, arguments=edited)
    assert response.status_code == 200, response.text
    assert response.json()["outcome"] == "approved"
    record = server.wait_state(run_id, "completed")
    assert record.result_text == "Done: dropped stg_2022 with cascade."
    decision = record.decided[approval_id]
    assert decision.arguments == edited and decision.original_arguments == {"name": "stg_2023"}
    assert decision.source.via == "http"
    with server.client() as http:
        [row] = http.get("/approvals", params={"status": "all", "run_id": run_id}).json()
    assert row["status"] == "approved" and row["edited_arguments"] == edited
    assert row["input"] == {"name": "stg_2023"} and row["allow_edit"] is True


def test_an_edit_of_a_tool_that_allows_none_is_a_422_and_a_reply_settles(server: Server) -> None:
    run_id, approval = _waiting(server, "janitor")
    assert approval["allow_edit"] is False and approval["parameters"] is None
    approval_id = approval["approval_id"]
    refused = _verdict(
        server, run_id, approval_id, approve=True, token=approval["token"], arguments={"name": "x"}
    )
    assert refused.status_code == 422
    assert refused.json()["error"]["type"] == "EditNotAllowedError"
    response = _verdict(server, run_id, approval_id, approve=False, reply="use stg_2022")
    assert response.status_code == 200, response.text
    assert response.json()["outcome"] == "replied"
    assert server.wait_state(run_id, "completed").result_text == "Done: use stg_2022."
    loser = _verdict(server, run_id, approval_id, approve=True, token=approval["token"])
    assert loser.status_code == 409 and loser.json()["error"]["verdict"] == "replied"
    with server.client() as http:
        [row] = http.get("/approvals", params={"status": "replied", "run_id": run_id}).json()
    assert row["reply"] == "use stg_2022"


def _link(server: Server, run_id: str) -> str:
    async def go() -> str:
        run = await server.runtime.get_run(run_id)
        [request] = await run.pending_approvals()
        return await approval_link(server.runtime, run_id, request.approval_id, server.url)

    link: str = server.call(go())
    return link


def test_the_link_page_offers_an_edit_box_only_where_the_tool_allows_it(server: Server) -> None:
    editable, fixed = _waiting(server, "editor")[0], _waiting(server, "janitor")[0]
    with server.client(auth=False) as http:
        page = http.get(_link(server, editable)).text
        other = http.get(_link(server, fixed)).text
    assert 'id="edited"' in page and 'id="edit"' in page and "&quot;stg_2023&quot;" in page
    assert 'id="edited"' not in other
    assert 'id="reply"' in page and 'id="reply"' in other


def test_edit_and_reply_clicked_in_headless_chromium(server: Server) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM} (bash .ci/run installs it)")
    editable, fixed = _waiting(server, "editor")[0], _waiting(server, "janitor")[0]
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(_link(server, editable))
            page.click("text=Edit the arguments, then approve")
            page.fill("#edited", '{"name": "nope", "extra": 1}')
            page.click("#edit")
            outcome = page.locator("#outcome[data-state]")
            outcome.wait_for(timeout=10_000)
            assert outcome.get_attribute("data-state") == "refused"  # 422: fix it, send again
            page.fill("#edited", '{"name": "stg_2021"}')
            page.click("#edit")
            page.locator("#outcome[data-state=approved]").wait_for(timeout=10_000)
            page.goto(_link(server, fixed))
            page.click("text=Reply instead of running the tool")
            page.fill("#reply-text", "not today")
            page.click("#reply")
            page.locator("#outcome[data-state=replied]").wait_for(timeout=10_000)
        finally:
            browser.close()
    assert server.wait_state(editable, "completed").result_text == "Done: dropped stg_2021."
    assert server.wait_state(fixed, "completed").result_text == "Done: not today."
