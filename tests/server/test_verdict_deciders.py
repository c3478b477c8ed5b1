"""Who decided over HTTP: named bearer tokens authenticate a decider; links are addressed.

A real bridge on 127.0.0.1 with named tokens (``create_app(tokens=...)``, what
``nbdurable serve --token-file`` passes): a verdict given with a named token is
recorded by that name, authenticated, via ``http``; one the agent's approvers do
not list is refused with 403 and nothing is recorded. An approval link minted
``to=`` a name records ``via="link"``, ``by=None``, ``addressed_to`` that name.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

import nbdurable as nd
from nbdurable.server import approval_link, link_for
from nbdurable.server._principals import TokenFileError, read_token_file

from .agents import guarded_agents
from .harness import TOKEN, Server

TESTS = Path(__file__).resolve().parents[1]
NAMED = {"ana": "ana-token-0123456789", "lee": "lee-token-0123456789", "bob": "bob-token-012345"}


@pytest.fixture
def named(make_server: Callable[..., Server]) -> Server:
    return make_server(tokens=NAMED, agents=guarded_agents)


def _as(server: Server, name: str | None) -> httpx.Client:
    token = NAMED[name] if name is not None else TOKEN
    return httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=20
    )


def _waiting(server: Server, agent: str, by: str | None) -> tuple[str, dict[str, Any]]:
    with _as(server, by) as http:
        run_id = str(
            http.post("/runs", json={"agent": agent, "prompt": "Clean up."}).json()["run_id"]
        )
        server.wait_state(run_id, "waiting_approval")
        [pending] = http.get(f"/runs/{run_id}/approvals").json()
    return run_id, pending


def _source(server: Server, run_id: str, approval_id: str) -> dict[str, Any]:
    source: dict[str, Any] = (
        server.record(run_id).decided[approval_id].source.model_dump(mode="json")
    )
    return source


def test_a_named_token_records_its_principal_as_authenticated(named: Server) -> None:
    run_id, pending = _waiting(named, "janitor", "bob")
    assert named.record(run_id).submitted_by == "bob"
    with _as(named, "lee") as http:
        done = http.post(
            f"/runs/{run_id}/approvals/{pending['approval_id']}",
            json={"approve": True, "token": pending["token"]},
        )
    assert done.status_code == 200, done.text
    source = _source(named, run_id, pending["approval_id"])
    assert (source["by"], source["authenticated"], source["via"]) == ("lee", True, "http")
    named.wait_state(run_id, "completed")
    [event] = [e for e in named.events(run_id) if e.type == "approval_resolved"]
    assert event.payload["source"]["by"] == "lee"
    # the unnamed token stays one unnamed principal: no name, not authenticated as anyone
    run_id, pending = _waiting(named, "janitor", None)
    with _as(named, None) as http:
        done = http.post(
            f"/runs/{run_id}/approvals/{pending['approval_id']}", json={"approve": False}
        )
    assert done.status_code == 200, done.text
    source = _source(named, run_id, pending["approval_id"])
    assert (source["by"], source["authenticated"], source["via"]) == (None, False, "http")


def test_a_named_token_the_agent_does_not_allow_gets_403(named: Server) -> None:
    run_id, pending = _waiting(named, "guarded", "ana")
    path = f"/runs/{run_id}/approvals/{pending['approval_id']}"
    body = {"approve": True, "token": pending["token"]}
    for who in ("bob", None):  # not listed; the unnamed principal has no name to list
        with _as(named, who) as http:
            refused = http.post(path, json=body)
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert (
            error["type"] == "ApproverNotAllowedError" and "only ana, lee may" in error["message"]
        )
    with _as(named, "ana") as http:  # listed, but she submitted it
        refused = http.post(path, json=body)
    assert refused.status_code == 403 and "submitted run" in refused.json()["error"]["message"]
    record = named.record(run_id)
    assert record.state == "waiting_approval" and record.decided == {}
    with _as(named, "lee") as http:
        assert http.post(path, json=body).status_code == 200
    source = _source(named, run_id, pending["approval_id"])
    assert (source["by"], source["authenticated"]) == ("lee", True)
    named.wait_state(run_id, "completed")


def _link_to(
    server: Server, run_id: str, approval_id: str, to: str | None, by: str | None = None
) -> str:
    link: str = server.call(
        approval_link(server.runtime, run_id, approval_id, server.url, to=to, by=by)
    )
    return link


def _token(link: str) -> str:
    return parse_qs(urlsplit(link).query)["token"][0]


def test_a_link_verdict_is_recorded_as_addressed_never_as_by(named: Server) -> None:
    run_id, pending = _waiting(named, "janitor", "ana")
    approval_id = pending["approval_id"]
    token = _token(_link_to(named, run_id, approval_id, "lee", by="bob"))
    with httpx.Client(base_url=named.url, timeout=20) as http:
        done = http.post(f"/approve/{run_id}/{approval_id}", json={"approve": True, "token": token})
    assert done.status_code == 200, done.text
    source = _source(named, run_id, approval_id)
    assert source["via"] == "link" and source["addressed_to"] == "lee"
    assert source["by"] is None and source["authenticated"] is False
    # who minted it is recorded too: bob, a claimed name (minted from Python)
    assert (source["minted_by"], source["minted_via"]) == ("bob", "api")
    assert (named.wait_state(run_id, "completed").result_text or "").startswith("Done")


def test_a_link_is_accepted_only_when_addressed_to_an_approver(named: Server) -> None:
    run_id, pending = _waiting(named, "guarded", "ana")
    approval_id = pending["approval_id"]
    path = f"/approve/{run_id}/{approval_id}"
    # minting is refused: by someone not listed, or addressed to someone not listed
    for by, to in (("bob", None), ("bob", "lee"), ("lee", "bob")):
        with pytest.raises(nd.ApproverNotAllowedError, match="nothing was minted"):
            _link_to(named, run_id, approval_id, to, by=by)
    with httpx.Client(base_url=named.url, timeout=20) as http:
        # a link signed without the rule (link_for: no minter) decides nothing reserved
        request = _pending(named, run_id)
        unchecked = link_for(named.runtime.signer, run_id, request, named.url, to="lee")
        page = http.get(path, params={"token": _token(unchecked)})  # it says so when opened
        assert page.status_code == 403 and "names no minter" in page.text
        refused = http.post(path, json={"approve": True, "token": _token(unchecked)})
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert error["type"] == "ApproverNotAllowedError" and "names no minter" in error["message"]
        assert named.record(run_id).decided == {}
        # GET /runs/{id}/approvals?to=lee, as ana (an approver), hands out links addressed to lee
        with _as(named, "ana") as api:
            [listed] = api.get(f"/runs/{run_id}/approvals", params={"to": "lee"}).json()
        done = http.post(path, json={"approve": True, "token": _token(listed["link"])})
    assert done.status_code == 200, done.text
    source = _source(named, run_id, approval_id)
    assert (source["addressed_to"], source["minted_by"], source["minted_via"]) == (
        "lee",
        "ana",
        "http",
    )


def _pending(server: Server, run_id: str) -> nd.ToolApprovalRequest:
    [request] = server.call(nd.runtime.Run(server.runtime, run_id).pending_approvals())
    return request


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("ana Zq-ana\n", "line 1: expected 'name: token'"),
        ("# team\n\nana: Zq1\nana: Zq2\n", "line 4: 'ana' appears twice"),
        ("ana: Zq\nlee: Zq\n", "line 2: the token of 'lee' is another name's too"),
        ("ana:\n", "line 1: the token of 'ana' is blank"),
        ("a b: Zq3\n", "line 1: 'a b' is not a valid name"),
        ("# only a comment\n", "names no principal"),
    ],
)
def test_a_bad_token_file_is_a_typed_error_naming_the_line(
    tmp_path: Path, text: str, match: str
) -> None:
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(TokenFileError, match=match) as bad:
        read_token_file(path)
    assert isinstance(bad.value, nd.ConfigurationError)
    assert "Zq" not in str(bad.value)  # never a token in the message


def test_a_token_file_is_read_with_comments_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# the team\n\nana: ana-secret\n  lee :  lee-secret  \n")
    assert read_token_file(path) == {"ana": "ana-secret", "lee": "lee-secret"}
    with pytest.raises(TokenFileError, match="cannot be read"):
        read_token_file(tmp_path / "missing")


def test_serve_with_a_bad_token_file_stops_at_start_up(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("ana: a-token\nlee\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("NBDURABLE_SERVER_TOKEN", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbdurable.cli",
            "serve",
            "--store",
            f"sqlite:///{tmp_path}/runs.db",
            "--agents",
            "server.agents:agents",
            "--port",
            "0",
            "--token-file",
            str(tokens),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"nbdurable: token file {tokens}, line 2: expected 'name: token'\n"
