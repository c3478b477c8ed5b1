"""``nbdurable serve`` as a subprocess: a run submitted, streamed and approved over HTTP."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from httpx_sse import connect_sse

TESTS = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env.pop("NBDURABLE_SERVER_TOKEN", None)
    return env


def _documented_serve_commands() -> list[str]:
    root = TESTS.parent
    blocks = [
        block
        for doc in (root / "README.md", root / "docs" / "server.md")
        for block in re.findall(r"^```bash\n(.*?)\n```", doc.read_text(), re.S | re.M)
    ]
    return [block for block in blocks if "nbdurable serve" in block]


def test_the_documented_serve_command_keeps_the_token_out_of_process_listings() -> None:
    """README.md and docs/server.md set NBDURABLE_SERVER_TOKEN; none passes --token,
    which every process listing shows."""
    commands = _documented_serve_commands()
    assert len(commands) >= 2
    for block in commands:
        assert "--token" not in block, block
        assert "NBDURABLE_SERVER_TOKEN" in block, block


def test_serve_subprocess_end_to_end(tmp_path: Path) -> None:
    """As documented: the token in NBDURABLE_SERVER_TOKEN, not on the command line."""
    store = f"sqlite:///{tmp_path}/runs.db"
    command = [
        sys.executable, "-m", "nbdurable.cli", "serve", "--store", store,
        "--agents", "server.agents:agents", "--port", "0",
        "--public-url", "https://approvals.example/nb", "--poll-interval", "0.01",
    ]  # fmt: skip
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**_env(), "NBDURABLE_SERVER_TOKEN": "cli-token"},
    )
    try:
        listing = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert b"cli-token" not in listing
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("nbdurable serve: http://127.0.0.1:"), line + (
            process.stderr.read() if process.poll() is not None and process.stderr else ""
        )
        url = line.split()[2]
        assert time.monotonic() - started < 30
        auth = {"Authorization": "Bearer cli-token"}
        with httpx.Client(base_url=url, headers=auth, timeout=20) as http:
            assert httpx.get(f"{url}/runs").status_code == 401
            run = http.post("/runs", json={"agent": "janitor", "prompt": "Clean up."}).json()
            run_id = run["run_id"]
            with connect_sse(http, "GET", f"/runs/{run_id}/events", params={"until": "stop"}) as s:
                waited = list(s.iter_sse())
            assert json.loads(waited[-1].data)["payload"]["state"] == "waiting_approval"
            [approval] = http.get(f"/runs/{run_id}/approvals").json()
            assert approval["link"].startswith(
                f"https://approvals.example/nb/approve/{run_id}/{approval['approval_id']}?token="
            )
            verdict = http.post(
                f"/runs/{run_id}/approvals/{approval['approval_id']}",
                json={"approve": True, "token": approval["token"]},
            )
            assert verdict.status_code == 200
            with connect_sse(
                http, "GET", f"/runs/{run_id}/events", headers={"Last-Event-ID": waited[-1].id}
            ) as s:
                rest = list(s.iter_sse())
            assert json.loads(rest[-1].data)["payload"]["state"] == "completed"
            assert http.get(f"/runs/{run_id}").json()["result_text"] == "Done: dropped stg_2023."
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(15)
        finally:
            if process.poll() is None:
                process.kill()
    assert code == 0, process.stderr.read() if process.stderr else ""


def test_serve_refuses_a_public_host_without_a_token(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    command = [sys.executable, "-m", "nbdurable.cli", "serve", "--store", store]
    command += ["--agents", "server.agents:agents", "--host", "0.0.0.0", "--port", "0"]
    done = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0 without a token" in done.stderr
