"""Who may mint an approval link, over a real bridge with named tokens (separate processes).

``nbdurable serve --token-file`` runs as a subprocess on 127.0.0.1 with the
``reserved`` agent, whose ``drop_table`` calls only ana may decide. The attack
of issue 34: lee (a valid API principal, not an approver) asks the bridge for a
link addressed to ana and approves the call with it. Each path that mints a
link is tried in its own process: the HTTP API (the attack itself, and the
inbox), Python in another process (a notebook), the notifier; every link
records who minted it, and the verdict's record, the event, ``runs approvals``
and ``runs explain`` show it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from support.notify_receiver import receiver

import nbdurable as nd

TESTS = Path(__file__).resolve().parents[1]
TOKENS = {"ana": "ana-token-0123456789", "lee": "lee-token-0123456789"}
UNNAMED = "unnamed-token-0123456789"
NOTIFY_SECRET = "link minting notify secret"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["NBDURABLE_SERVER_TOKEN"] = UNNAMED
    env["NBDURABLE_NOTIFY_SECRET"] = NOTIFY_SECRET
    env.pop("NBDURABLE_APPROVAL_SECRET", None)
    env.pop("NBDURABLE_USER", None)
    return {**env, **extra}


@contextmanager
def bridge(tmp_path: Path, *flags: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``nbdurable serve --token-file`` (ana, lee; and the unnamed token) on a SQLite store."""
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{name}: {token}\n" for name, token in TOKENS.items()))
    command = [
        sys.executable, "-m", "nbdurable.cli", "serve", "--store", _store(tmp_path),
        "--agents", "server.agents:guarded_agents", "--port", "0", "--poll-interval", "0.01",
        "--token-file", str(tokens), *flags,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or _env()
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("nbdurable serve: http://127.0.0.1:"), line + (
        process.stderr.read() if process.poll() is not None and process.stderr else ""
    )
    try:
        yield line.split()[2]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(30) == 0, process.stderr.read() if process.stderr else ""
        finally:
            if process.poll() is None:
                process.kill()


def _store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/runs.db"


def _as(url: str, name: str | None) -> httpx.Client:
    token = TOKENS[name] if name is not None else UNNAMED
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=20)


def _wait_for(check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.05)
    return found


def _waiting(url: str, agent: str = "reserved", by: str = "lee") -> tuple[str, str]:
    """Submit ``agent`` as ``by``; the run id and its one approval id, once it waits."""
    with _as(url, by) as http:
        run_id = str(http.post("/runs", json={"agent": agent, "prompt": "Go."}).json()["run_id"])
        _wait_for(lambda: http.get(f"/runs/{run_id}").json()["state"] == "waiting_approval")
        [pending] = http.get(f"/runs/{run_id}/approvals").json()
    return run_id, str(pending["approval_id"])


def _token(link: str) -> str:
    return parse_qs(urlsplit(link).query)["token"][0]


def _decided(url: str, run_id: str) -> dict[str, Any]:
    with _as(url, "ana") as http:
        rows = http.get("/approvals", params={"status": "all", "run_id": run_id}).json()
    return dict(rows[0])


def _completed(url: str, run_id: str) -> str:
    with _as(url, "ana") as http:
        return str(
            _wait_for(
                lambda: (
                    (run := http.get(f"/runs/{run_id}").json())["state"] == "completed"
                    and run["result_text"]
                )
            )
        )


def _cli(tmp_path: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nbdurable.cli", "runs", *args, "--store", _store(tmp_path)],
        capture_output=True, text=True, env=_env(COLUMNS="250"), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_principal_not_among_the_approvers_cannot_mint_a_link_for_them(tmp_path: Path) -> None:
    with bridge(tmp_path) as url:
        run_id, approval_id = _waiting(url)
        path = f"/approve/{run_id}/{approval_id}"
        # the attack: lee asks for a link addressed to ana, then approves with it
        for who in ("lee", None):  # lee, and the unnamed token (no name to be an approver)
            with _as(url, who) as http:
                refused = http.get(f"/runs/{run_id}/approvals", params={"to": "ana"})
            assert refused.status_code == 403, refused.text
            error = refused.json()["error"]
            assert error["type"] == "ApproverNotAllowedError"
            assert "may not mint a link" in error["message"] and "only ana may" in error["message"]
        # without ``to`` lee sees the call, with no link; the bare token decides nothing
        with _as(url, "lee") as http:
            [listed] = http.get(f"/runs/{run_id}/approvals").json()
            [row] = http.get("/approvals", params={"run_id": run_id}).json()
        assert listed["link"] is None and row["link"] is None
        with httpx.Client(base_url=url, timeout=20) as anonymous:
            bare = anonymous.post(path, json={"approve": True, "token": listed["token"]})
        assert bare.status_code == 403, bare.text
        # ana may not address her link to lee either: lee could never decide with it
        with _as(url, "ana") as http:
            to_lee = http.get(f"/runs/{run_id}/approvals", params={"to": "lee"})
            assert to_lee.status_code == 403 and "not 'lee'" in to_lee.json()["error"]["message"]
            [mine] = http.get(f"/runs/{run_id}/approvals").json()  # default: addressed to her
            [inbox] = http.get("/approvals", params={"run_id": run_id}).json()
        assert _decided(url, run_id)["status"] == "pending"
        assert mine["link"] and inbox["link"]
        with httpx.Client(base_url=url, timeout=20) as anonymous:
            done = anonymous.post(path, json={"approve": True, "token": _token(mine["link"])})
        assert done.status_code == 200, done.text
        assert _completed(url, run_id).startswith("Done: dropped")
        row = _decided(url, run_id)
        assert (row["via"], row["addressed_to"], row["decided_by"]) == ("link", "ana", None)
        assert (row["minted_by"], row["minted_via"]) == ("ana", "http")
    # the record, the event and the CLI (another process, after the bridge stopped) show it
    shown = json.loads(_cli(tmp_path, "approvals", "--all", "--json"))
    assert (shown[0]["minted_by"], shown[0]["minted_via"]) == ("ana", "http")
    assert "link to ana (minted by ana)" in _cli(tmp_path, "approvals", "--all")
    assert "approved via link addressed to ana, minted by ana" in _cli(tmp_path, "explain", run_id)
    events = asyncio.run(nd.events.read_events(nd.open_store(_store(tmp_path)), run_id))
    [resolved] = [e for e in events if e.type == "approval_resolved"]
    assert resolved.payload["source"]["minted_by"] == "ana"


_NOTEBOOK = textwrap.dedent(
    """
    import asyncio, sys
    import nbdurable as nd
    from nbdurable.server import approval_link

    async def main(store, run_id, approval_id, base, to):
        runtime = await nd.DurableRuntime.open(store=nd.open_store(store))
        try:
            print(await approval_link(runtime, run_id, approval_id, base, to=to or None))
        except nd.ApproverNotAllowedError as refused:
            print(f"refused: {refused}")
        finally:
            await runtime.close()

    asyncio.run(main(*sys.argv[1:]))
    """
)


def _notebook(tmp_path: Path, user: str, run_id: str, approval_id: str, url: str, to: str) -> str:
    """Mint a link from another Python process (a notebook's kernel) claiming to be ``user``."""
    done = subprocess.run(
        [sys.executable, "-c", _NOTEBOOK, _store(tmp_path), run_id, approval_id, url, to],
        capture_output=True, text=True, env=_env(NBDURABLE_USER=user), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_notebook_mints_a_link_only_as_an_approver(tmp_path: Path) -> None:
    with bridge(tmp_path) as url:
        run_id, approval_id = _waiting(url)
        refused = _notebook(tmp_path, "lee", run_id, approval_id, url, "ana")
        assert refused.startswith("refused: 'lee' (claimed) may not mint a link"), refused
        link = _notebook(tmp_path, "ana", run_id, approval_id, url, "")
        assert link.startswith(f"{url}/approve/{run_id}/"), link
        with httpx.Client(base_url=url, timeout=20) as anonymous:
            done = anonymous.post(
                f"/approve/{run_id}/{approval_id}", json={"approve": True, "token": _token(link)}
            )
        assert done.status_code == 200, done.text
        assert _completed(url, run_id).startswith("Done: dropped")
        row = _decided(url, run_id)
        assert (row["addressed_to"], row["minted_by"], row["minted_via"]) == ("ana", "ana", "api")
    assert "link to ana (minted by ana, claimed)" in _cli(tmp_path, "approvals", "--all")
    assert "minted by ana (claimed)" in _cli(tmp_path, "explain", run_id)


def test_a_notification_addresses_its_links_to_the_approvers_only(tmp_path: Path) -> None:
    public = "https://approvals.example/nb"
    with (
        receiver() as hook,
        bridge(tmp_path, "--public-url", public, env=_env(NBDURABLE_NOTIFY_URL=hook.url)) as url,
    ):
        run_id, approval_id = _waiting(url)
        [message] = _wait_for(hook.delivered)
        assert message.genuine(NOTIFY_SECRET)
        payload = message.payload
        assert payload["approvers"] == ["ana"] and "link" not in payload
        assert list(payload["links"]) == ["ana"]
        link = urlsplit(payload["links"]["ana"])
        assert link.path == f"/nb/approve/{run_id}/{approval_id}"
        with httpx.Client(base_url=url, timeout=20) as anonymous:
            done = anonymous.post(
                link.path.removeprefix("/nb"),
                json={"approve": True, "token": parse_qs(link.query)["token"][0]},
            )
        assert done.status_code == 200, done.text
        assert _completed(url, run_id).startswith("Done: dropped")
        row = _decided(url, run_id)
        assert (row["addressed_to"], row["minted_by"], row["minted_via"]) == (
            "ana",
            None,
            "notify",
        )
    assert "via link addressed to ana, sent by notification" in _cli(tmp_path, "explain", run_id)
