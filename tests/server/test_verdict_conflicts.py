"""Verdicts over HTTP that lose (409 naming the winner), repeat (the original 200) or expired (410)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import nbdurable as nd

from .harness import Server

ROOT = Path(__file__).resolve().parents[2]
SECRET = "bridge verdict secret"


def _waiting(server: Server) -> tuple[str, dict[str, Any]]:
    with server.client() as http:
        run_id = http.post("/runs", json={"agent": "janitor", "prompt": "Clean up."}).json()[
            "run_id"
        ]
        server.wait_state(run_id, "waiting_approval")
        [approval] = http.get(f"/runs/{run_id}/approvals").json()
    return run_id, approval


def _link_path_and_token(approval: dict[str, Any]) -> tuple[str, str]:
    path, query = approval["link"].split("?token=")
    return "/" + path.split("/", 3)[3], unquote(query)


def test_the_api_and_a_link_racing_record_one_verdict(server: Server) -> None:
    for _ in range(5):
        run_id, approval = _waiting(server)
        path, link_token = _link_path_and_token(approval)
        answers: dict[str, Any] = {}
        barrier = threading.Barrier(2)

        def send(
            name: str,
            url: str,
            body: dict[str, Any],
            auth: bool,
            barrier: threading.Barrier = barrier,
            answers: dict[str, Any] = answers,
        ) -> None:
            with server.client(auth=auth) as http:
                barrier.wait()
                answers[name] = http.post(url, json=body)

        api = f"/runs/{run_id}/approvals/{approval['approval_id']}"
        threads = [
            threading.Thread(
                target=send,
                args=("approve", api, {"approve": True, "token": approval["token"]}, True),
            ),
            threading.Thread(
                target=send, args=("deny", path, {"approve": False, "token": link_token}, False)
            ),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        codes = sorted(r.status_code for r in answers.values())
        assert codes == [200, 409], {k: r.text for k, r in answers.items()}
        winner = "approved" if answers["approve"].status_code == 200 else "denied"
        loser = answers["deny" if winner == "approved" else "approve"].json()["error"]
        assert loser["type"] == "ApprovalNotPendingError" and loser["verdict"] == winner
        assert f"already {winner}" in loser["message"]
        text = server.wait_state(run_id, "completed").result_text or ""
        assert text.startswith("Done: dropped") == (winner == "approved")  # the tool ran iff


def test_another_process_decided_first_and_http_says_which(server: Server, tmp_path: Path) -> None:
    run_id, approval = _waiting(server)
    store_url = str(server.runtime.store.path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbdurable.cli",
            "runs",
            "deny",
            run_id,
            approval["approval_id"],
            "--reason",
            "not today",
            "--store",
            f"sqlite:///{store_url}",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    with server.client() as http:
        lost = http.post(
            f"/runs/{run_id}/approvals/{approval['approval_id']}",
            json={"approve": True, "token": approval["token"]},
        )
        assert lost.status_code == 409 and lost.json()["error"]["verdict"] == "denied"
        again = http.post(
            f"/runs/{run_id}/approvals/{approval['approval_id']}", json={"approve": False}
        )
        assert again.status_code == 200 and again.json()["outcome"] == "denied"  # the same verdict
    path, link_token = _link_path_and_token(approval)
    with server.client(auth=False) as http:
        page = http.get(path, params={"token": link_token})
        assert page.status_code == 409 and "already denied" in page.text
    assert "not today" in (server.wait_state(run_id, "completed").result_text or "")


class _Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def now(self) -> int:
        return self.t


def test_a_token_issued_at_the_epoch_is_refused_and_a_fresh_one_approves(make_server: Any) -> None:
    clock = _Clock(0)  # requests are signed with issued_at=0
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    server = make_server(runtime_options={"approval_signer": signer})
    run_id, approval = _waiting(server)
    assert signer.verify(approval["token"])["issued_at"] == 0
    path, link_token = _link_path_and_token(approval)
    clock.t = int(time.time() * 1000)  # now
    api = f"/runs/{run_id}/approvals/{approval['approval_id']}"
    with server.client() as http:
        refused = http.post(api, json={"approve": True, "token": approval["token"]})
    with server.client(auth=False) as http:
        page = http.get(path, params={"token": link_token})
        link = http.post(path, json={"approve": True, "token": link_token})
    for response in (refused, link):
        assert response.status_code == 410, response.text
        error = response.json()["error"]
        assert error["type"] == "ApprovalExpiredError"
        assert "ask for a new link" in error["message"] and "still waits" in error["message"]
    assert page.status_code == 410 and "ask for a new link" in page.text
    record = server.record(run_id)
    assert record.state == "waiting_approval" and record.verdicts == {}
    with server.client() as http:
        [fresh] = http.get(f"/runs/{run_id}/approvals").json()
        assert signer.verify(fresh["token"])["issued_at"] == clock.t
        ok = http.post(api, json={"approve": True, "token": fresh["token"]})
    assert ok.status_code == 200 and ok.json()["outcome"] == "approved"
    assert server.wait_state(run_id, "completed").result_text == "Done: dropped stg_2023."
