"""Approval links over real HTTP: the page (no bearer token), its verdicts, bad tokens,
escaping, no secret in the page, and its Approve button clicked in headless Chromium."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

import nbdurable as nd
from nbdurable.server import ApprovalNotPendingError, approval_link

from .harness import TOKEN, Server

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _waiting(server: Server, agent: str = "janitor", prompt: str = "Clean up.") -> str:
    with server.client() as http:
        run_id = str(http.post("/runs", json={"agent": agent, "prompt": prompt}).json()["run_id"])
    server.wait_state(run_id, "waiting_approval")
    return run_id


def _mint(server: Server, run_id: str) -> tuple[str, str]:
    async def go() -> tuple[str, str]:
        run = await server.runtime.get_run(run_id)
        [request] = await run.pending_approvals()
        link = await approval_link(server.runtime, run_id, request.approval_id, server.url)
        return link, request.approval_id

    result: tuple[str, str] = server.call(go())
    return result


def _token(link: str) -> str:
    return parse_qs(urlsplit(link).query)["token"][0]


def test_link_page_shows_the_call_without_the_bearer_token(server: Server) -> None:
    run_id = _waiting(server)
    link, approval_id = _mint(server, run_id)
    assert link.startswith(f"{server.url}/approve/{run_id}/{approval_id}?token=v1.")
    with server.client(auth=False) as http:
        page = http.get(link)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["cache-control"] == "no-store"
    assert "script-src 'nonce-" in page.headers["content-security-policy"]
    text = page.text
    assert "drop_table" in text and "stg_2023" in text and "Approve" in text and "Deny" in text
    assert "the run&#x27;s own agent" in text  # the agent path of a top-level call
    assert "ago" in text
    # no secret in the page: not the bearer token, not the HMAC secret, not even the link token
    assert TOKEN not in text and _token(link) not in text
    secret = server.runtime.signer._key.decode()
    assert secret not in text


def test_link_verdicts_need_the_links_token(server: Server) -> None:
    run_id = _waiting(server)
    link, approval_id = _mint(server, run_id)
    token = _token(link)
    path = f"/approve/{run_id}/{approval_id}"
    with server.client(auth=False) as http:
        # a link deny is bound to its token too (no bearer token here)
        assert http.post(path, json={"approve": False}).status_code == 403
        forged = nd.ApprovalSigner("other").sign(
            nd.ToolApprovalRequest(
                approval_id=approval_id, tool_call_id="x", tool_name="drop_table"
            ),
            run_id=run_id,
        )
        for bad in (forged, token[:-1] + ("A" if token[-1] != "A" else "B"), "garbage"):
            page = http.get(path, params={"token": bad})
            assert page.status_code == 403 and "does not work" in page.text
            refused = http.post(path, json={"approve": True, "token": bad})
            assert refused.status_code == 403
            assert refused.json()["error"]["type"] == "ApprovalTokenError"
        assert http.get(path).status_code == 422  # no token at all
        assert server.record(run_id).state == "waiting_approval"
        ok = http.post(path, json={"approve": False, "token": token, "reason": "not today"})
        assert ok.status_code == 200 and ok.json() == {
            "outcome": "denied",
            "message": "denied: not today",
        }
        assert set(ok.json()) == {"outcome", "message"}  # no run record for link holders
        again = http.get(link)
        assert again.status_code == 409 and "ApprovalNotPendingError" in again.text
        replay = http.post(path, json={"approve": True, "token": token})
        assert replay.status_code == 409
    assert "not today" in (server.wait_state(run_id, "completed").result_text or "")


def test_a_link_of_another_run_does_not_open_this_one(server: Server) -> None:
    run_a, run_b = _waiting(server), _waiting(server)
    link_a, approval_a = _mint(server, run_a)
    _, approval_b = _mint(server, run_b)
    with server.client(auth=False) as http:
        crossed = http.get(f"/approve/{run_b}/{approval_b}", params={"token": _token(link_a)})
        assert crossed.status_code == 403
        crossed_run = http.get(f"/approve/{run_b}/{approval_a}", params={"token": _token(link_a)})
        assert crossed_run.status_code == 403
    with pytest.raises(ApprovalNotPendingError):
        server.call(approval_link(server.runtime, run_a, "approval_nope", server.url))


def test_the_page_escapes_what_it_shows(server: Server) -> None:
    # the model's arguments are data, never markup: a prompt cannot inject into the page
    run_id = _waiting(server, "pair")

    async def go() -> str:
        run = await server.runtime.get_run(run_id)
        request = (await run.pending_approvals())[0]
        return await approval_link(server.runtime, run_id, request.approval_id, server.url)

    link = server.call(go())
    with server.client(auth=False) as http:
        text = http.get(link).text
    assert "<script nonce=" in text and text.count("<script") == 1
    from nbdurable.server._approval_page import render_page

    evil = nd.ToolApprovalRequest(
        approval_id="a<b>",
        tool_call_id="c",
        tool_name="<img src=x onerror=alert(1)>",
        input={"name": "</pre><script>alert(1)</script>"},
        agent_path=("<i>sub</i>",),
    )
    html = render_page("run-<x>", evil, 0, "nonce")
    assert "<img" not in html and "<script>alert" not in html and "<i>sub" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_approve_button_clicked_in_headless_chromium(server: Server) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM} (bash .ci/run installs it)")
    run_id = _waiting(server)
    link, _ = _mint(server, run_id)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(link)
            assert page.locator("#tool").inner_text() == "drop_table"
            assert '"stg_2023"' in page.locator("#arguments").inner_text()
            page.click("#approve")
            outcome = page.locator("#outcome[data-state]")
            outcome.wait_for(timeout=10_000)
            assert outcome.get_attribute("data-state") == "approved"
            assert "approved" in outcome.inner_text()
            assert page.locator("#approve").is_disabled()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "server-approval-link.png"))
            # the same link again: the request no longer waits
            page.goto(link)
            assert "does not work" in page.content()
            assert errors == [] or all("409" in e for e in errors), errors
        finally:
            browser.close()
    assert server.wait_state(run_id, "completed").result_text == "Done: dropped stg_2023."
