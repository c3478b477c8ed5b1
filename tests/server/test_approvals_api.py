"""Verdicts over real HTTP: a good token approves; forged, altered, expired, cross-run,
cross-call and replayed tokens are refused with typed errors and change nothing."""

from __future__ import annotations

from typing import Any

import nbdurable as nd

from .harness import Server


def _waiting(server: Server, agent: str = "janitor") -> tuple[str, list[dict[str, Any]]]:
    with server.client() as http:
        run_id = http.post("/runs", json={"agent": agent, "prompt": "Clean up."}).json()["run_id"]
        server.wait_state(run_id, "waiting_approval")
        approvals = http.get(f"/runs/{run_id}/approvals").json()
    return run_id, approvals


def _verdict(server: Server, run_id: str, approval_id: str, **body: Any) -> Any:
    with server.client() as http:
        return http.post(f"/runs/{run_id}/approvals/{approval_id}", json=body)


def _unchanged(server: Server, run_id: str, events_before: int) -> None:
    record = server.record(run_id)
    assert record.state == "waiting_approval" and record.verdicts == {}
    assert len(server.events(run_id)) == events_before


def test_pending_approvals_carry_token_and_link(server: Server) -> None:
    run_id, [approval] = _waiting(server)
    assert approval["tool_name"] == "drop_table" and approval["input"] == {"name": "stg_2023"}
    assert approval["agent_path"] == [] and approval["token"].startswith("v1.")
    assert approval["requested_at"] > 0
    assert approval["link"].startswith(f"{server.url}/approve/{run_id}/{approval['approval_id']}?")
    with server.client() as http:
        assert http.get("/runs/nope/approvals").status_code == 404


def test_good_token_approves_and_the_run_completes(server: Server) -> None:
    run_id, [approval] = _waiting(server)
    response = _verdict(
        server, run_id, approval["approval_id"], approve=True, token=approval["token"]
    )
    assert response.status_code == 200, response.text
    assert response.json()["outcome"] == "approved"
    assert server.wait_state(run_id, "completed").result_text == "Done: dropped stg_2023."
    # replayed (a client retrying after a timeout): the original answer, and the tool ran once
    replay = _verdict(
        server, run_id, approval["approval_id"], approve=True, token=approval["token"]
    )
    assert replay.status_code == 200 and replay.json()["outcome"] == "approved"
    # the other verdict now loses, and is told which one won
    loser = _verdict(server, run_id, approval["approval_id"], approve=False)
    assert loser.status_code == 409
    assert loser.json()["error"]["type"] == "ApprovalNotPendingError"
    assert loser.json()["error"]["verdict"] == "approved"
    assert sum(e.type == "tool_result" for e in server.events(run_id)) == 1


def test_deny_needs_no_token_and_the_model_reads_the_reason(server: Server) -> None:
    run_id, [approval] = _waiting(server)
    response = _verdict(server, run_id, approval["approval_id"], approve=False, reason="prod data")
    assert response.status_code == 200 and response.json()["outcome"] == "denied"
    record = server.wait_state(run_id, "completed")
    assert record.result_text is not None and "prod data" in record.result_text


def test_bad_tokens_are_refused_and_change_nothing(server: Server) -> None:
    run_id, [approval] = _waiting(server)
    other_run, [other] = _waiting(server)
    approval_id, token = approval["approval_id"], approval["token"]
    prefix, payload, mac = token.split(".")
    fields = {k: v for k, v in approval.items() if k not in ("requested_at", "link", "token")}
    request = nd.ToolApprovalRequest.model_validate(fields)
    forged = nd.ApprovalSigner("not the server's secret").sign(request, run_id=run_id)
    altered_payload = (
        f"{prefix}.{payload[:-2]}{'A' if payload[-2] != 'A' else 'B'}{payload[-1]}.{mac}"
    )
    altered_mac = f"{prefix}.{payload}.{mac[:-1]}{'A' if mac[-1] != 'A' else 'B'}"
    before = len(server.events(run_id))
    for bad in (forged, altered_payload, altered_mac, other["token"], "v1.x.y", "", None):
        response = _verdict(server, run_id, approval_id, approve=True, token=bad)
        assert response.status_code == 403, (bad, response.text)
        assert response.json()["error"]["type"] == "ApprovalTokenError"
        _unchanged(server, run_id, before)
    # cross-run the other way: this run's token on the other run's approval
    response = _verdict(server, other_run, other["approval_id"], approve=True, token=token)
    assert response.status_code == 403
    assert server.record(other_run).state == "waiting_approval"
    # an unknown approval of a waiting run, and an unknown run
    assert _verdict(server, run_id, "approval_nope", approve=True, token=token).status_code == 409
    assert _verdict(server, "nope", approval_id, approve=True, token=token).status_code == 404
    # still approvable with the right token afterwards
    good = _verdict(server, run_id, approval_id, approve=True, token=token)
    assert good.status_code == 200
    server.wait_state(run_id, "completed")


def test_a_token_of_another_call_in_the_same_run_is_refused(server: Server) -> None:
    run_id, approvals = _waiting(server, "pair")
    first, second = approvals
    before = len(server.events(run_id))
    swapped = _verdict(server, run_id, first["approval_id"], approve=True, token=second["token"])
    assert swapped.status_code == 403
    _unchanged(server, run_id, before)
    for approval in approvals:
        ok = _verdict(
            server, run_id, approval["approval_id"], approve=True, token=approval["token"]
        )
        assert ok.status_code == 200
    server.wait_state(run_id, "completed")


class _Clock:
    def __init__(self) -> None:
        import time

        self.t = int(time.time() * 1000)

    def now(self) -> int:
        return self.t


def test_expired_token_is_refused(make_server: Any) -> None:
    clock = _Clock()
    signer = nd.ApprovalSigner("a test secret", clock=clock)
    server = make_server(runtime_options={"approval_signer": signer}, approval_max_age_ms=60_000)
    run_id, [approval] = _waiting(server)
    before = len(server.events(run_id))
    clock.t += 61_000
    response = _verdict(
        server, run_id, approval["approval_id"], approve=True, token=approval["token"]
    )
    assert response.status_code == 410
    error = response.json()["error"]
    assert error["type"] == "ApprovalExpiredError" and "ask for a new link" in error["message"]
    _unchanged(server, run_id, before)
    # a fresh link counts from when it was minted
    [fresh] = server.client().get(f"/runs/{run_id}/approvals").json()
    link_token = fresh["link"].split("token=")[1]
    with server.client(auth=False) as http:
        from urllib.parse import unquote

        ok = http.post(
            f"/approve/{run_id}/{approval['approval_id']}",
            json={"approve": True, "token": unquote(link_token)},
        )
    assert ok.status_code == 200, ok.text
    server.wait_state(run_id, "completed")
