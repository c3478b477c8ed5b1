"""The example AG-UI page (examples/agui_approval.html) in headless Chromium: served from
its own origin, it follows a waiting run through the bridge's AG-UI stream (CORS, the
bearer token) and decides the call with a resume entry, as docs/server.md shows:
approve, deny with a reason, edit the arguments, reply instead of the tool."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .agui_agents import editable_agents
from .harness import Server

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]


@pytest.fixture
def page_origin() -> Iterator[str]:
    """examples/ over HTTP on 127.0.0.1 (another origin than the bridge's)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(EXAMPLES))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _waiting(server: Server, agent: str = "janitor") -> str:
    with server.client() as http:
        run_id = http.post("/runs", json={"agent": agent, "prompt": "Go."}).json()["run_id"]
    server.wait_state(run_id, "waiting_approval")
    return str(run_id)


def test_the_example_page_decides_calls_through_the_agui_endpoints(
    make_server: Callable[..., Server], page_origin: str
) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is missing at {CHROMIUM} (bash .ci/run installs it)")
    server = make_server(cors_origins=[page_origin], agents=editable_agents)
    approved, denied = _waiting(server), _waiting(server)
    edited, replied = _waiting(server, "archivist"), _waiting(server, "archivist")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            errors: list[str] = []

            def open_run(run_id: str, tool: str = "drop_table", table: str = "stg_2023") -> Any:
                page = browser.new_page()
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(
                    f"{page_origin}/agui_approval.html"
                    f"#bridge={server.url}&token={server.token}&run={run_id}"
                )
                card = page.locator(".interrupt")
                card.wait_for(timeout=15_000)
                assert page.locator("#status").get_attribute("data-state") == "waiting"
                assert tool in card.inner_text() and table in card.inner_text()
                return page

            page = open_run(approved)
            page.click(".interrupt .approve")
            page.locator("#status[data-state=finished]").wait_for(timeout=15_000)
            assert page.locator("#status").inner_text() == "Finished: Done: dropped stg_2023."
            assert page.locator(".interrupt").get_attribute("data-verdict") == "approved"
            assert "→ dropped stg_2023" in page.locator(".tool .result").inner_text()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "server-agui-page.png"), full_page=True)

            page = open_run(denied)
            page.fill(".interrupt .reason", "not on a Friday")
            page.click(".interrupt .deny")
            page.locator("#status[data-state=finished]").wait_for(timeout=15_000)
            assert page.locator(".interrupt").get_attribute("data-verdict") == "denied"
            assert "not on a Friday" in page.locator(".tool .result").inner_text()

            page = open_run(edited, "archive_table", "stg")
            assert page.locator(".message").first.inner_text() == "Archiving."
            page.click(".interrupt .edit summary")  # folded: Approve and Deny stay one click
            assert '"name": "stg"' in page.input_value(".interrupt .arguments")
            page.fill(".interrupt .arguments", '{"name": "stg_old", "days": 7}')
            page.click(".interrupt .approve-edited")
            page.locator("#status[data-state=finished]").wait_for(timeout=15_000)
            assert page.locator(".interrupt").get_attribute("data-verdict") == "edited"
            assert (
                page.locator("#status").inner_text() == "Finished: Read: archived stg_old (7 days)"
            )

            page = open_run(replied, "archive_table", "stg")
            page.click(".interrupt .answer summary")
            page.fill(".interrupt .reply", "use the staging copy")
            page.click(".interrupt .send-reply")
            page.locator("#status[data-state=finished]").wait_for(timeout=15_000)
            assert page.locator(".interrupt").get_attribute("data-verdict") == "replied"
            assert page.locator("#status").inner_text() == "Finished: Read: use the staging copy"
            assert errors == [], errors
        finally:
            browser.close()
    assert server.record(approved).result_text == "Done: dropped stg_2023."
    assert server.record(denied).result_text.startswith("Kept it:")
    assert server.record(edited).result_text == "Read: archived stg_old (7 days)"
