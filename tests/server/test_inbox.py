"""``GET /approvals`` over real HTTP: the approval requests of every run, with their links."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import nbdurable as nd

from .harness import Server


def _submit(server: Server, agent: str) -> str:
    with server.client() as http:
        run_id = http.post("/runs", json={"agent": agent, "prompt": "Clean up."}).json()["run_id"]
    server.wait_state(run_id, "waiting_approval")
    return str(run_id)


def _link_parts(link: str) -> tuple[str, str]:
    parts = urlsplit(link)
    return parts.path, parse_qs(parts.query)["token"][0]


def test_the_inbox_lists_every_runs_pending_approvals_with_links(server: Server) -> None:
    wait = _submit(server, "janitor")
    pair = _submit(server, "pair")
    with server.client() as http:
        listed = http.get("/approvals")
        assert listed.status_code == 200, listed.text
        rows = listed.json()
        assert sorted(r["run_id"] for r in rows) == sorted([wait, pair, pair])
        assert {r["status"] for r in rows} == {"pending"}
        mine = next(r for r in rows if r["run_id"] == wait)
        assert mine["tool_name"] == "drop_table" and mine["input"] == {"name": "stg_2023"}
        assert mine["agent_path"] == [] and mine["requested_at"] > 0
        assert mine["waited_ms"] >= 0 and mine["decided_at"] is None
        assert "token" not in mine  # the link carries the only token
        path = f"/approve/{wait}/{mine['approval_id']}"
        assert mine["link"].startswith(f"{server.url}{path}?token=v1.")
        first, second = (r for r in rows if r["run_id"] == pair)
        denied = http.post(
            f"/runs/{pair}/approvals/{first['approval_id']}", json={"approve": False}
        )
        assert denied.status_code == 200
    # the link approves, without the bearer token
    link_path, token = _link_parts(mine["link"])
    with server.client(auth=False) as http:
        answer = http.post(link_path, json={"approve": True, "token": token})
        assert answer.status_code == 200, answer.text
    server.wait_state(wait, "completed")
    with server.client() as http:
        assert [r["approval_id"] for r in http.get("/approvals").json()] == [second["approval_id"]]
        every = http.get("/approvals", params={"status": "all"}).json()
        statuses = {r["approval_id"]: r["status"] for r in every}
        assert statuses == {
            mine["approval_id"]: "approved",
            first["approval_id"]: "denied",
            second["approval_id"]: "pending",
        }
        decided = next(r for r in every if r["approval_id"] == mine["approval_id"])
        assert decided["link"] is None and decided["decided_at"] >= decided["requested_at"]
        some = http.get("/approvals", params=[("status", "approved"), ("status", "denied")])
        assert sorted(r["status"] for r in some.json()) == ["approved", "denied"]
        commas = http.get("/approvals", params={"status": "approved,denied"}).json()
        assert commas == some.json()
        one = http.get("/approvals", params={"run_id": wait, "status": "all"}).json()
        assert [r["run_id"] for r in one] == [wait]
        bad = http.get("/approvals", params={"status": "waiting"})
        assert bad.status_code == 422 and bad.json()["error"]["type"] == "ConfigurationError"
        missing = http.get("/approvals", params={"run_id": "nope"})
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "RunNotFoundError"
        schema = http.get("/openapi.json").json()
        assert "/approvals" in schema["paths"]
        assert "InboxApprovalOut" in schema["components"]["schemas"]


class _Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def now(self) -> int:
        return self.t


def test_an_expired_request_is_listed_as_expired_with_a_fresh_link(make_server: Any) -> None:
    clock = _Clock(0)  # requests are signed with issued_at=0
    signer = nd.ApprovalSigner("an inbox secret", clock=clock)
    server = make_server(runtime_options={"approval_signer": signer})
    run_id = _submit(server, "janitor")
    clock.t = int(time.time() * 1000)
    with server.client() as http:
        [row] = http.get("/approvals").json()
    assert row["status"] == "expired"
    _, token = _link_parts(row["link"])
    assert signer.verify(token)["issued_at"] == clock.t
    with server.client(auth=False) as http:
        path = f"/approve/{run_id}/{row['approval_id']}"
        answer = http.post(path, json={"approve": True, "token": token})
    assert answer.status_code == 200, answer.text
    assert server.wait_state(run_id, "completed").result_text == "Done: dropped stg_2023."
