"""``nbdurable serve --notify-url`` as a subprocess: a waiting run posts one signed
message to a receiver on 127.0.0.1, and its link decides the call on the bridge."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
from support.notify_receiver import receiver

TESTS = Path(__file__).resolve().parents[1]
SECRET = "serve notify secret"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["NBDURABLE_SERVER_TOKEN"] = "cli-token"
    env["NBDURABLE_NOTIFY_SECRET"] = SECRET
    return {**env, **extra}


def _serve(store: str, *flags: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable, "-m", "nbdurable.cli", "serve", "--store", store,
        "--agents", "server.agents:agents", "--port", "0", "--poll-interval", "0.01", *flags,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("nbdurable serve: http://127.0.0.1:"), line + (
        process.stderr.read() if process.poll() is not None and process.stderr else ""
    )
    return process, line.split()[2]


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(30) == 0, process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()


def _wait_for(check: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.05)


def test_serve_notifies_once_with_a_link_that_decides_the_call(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    with receiver(script=[500]) as hook:  # the first attempt fails: retried
        process, url = _serve(
            store,
            "--public-url",
            "https://approvals.example/nb",
            env=_env(NBDURABLE_NOTIFY_URL=hook.url),
        )
        try:
            auth = {"Authorization": "Bearer cli-token"}
            with httpx.Client(base_url=url, headers=auth, timeout=20) as http:
                run_id = http.post("/runs", json={"agent": "janitor", "prompt": "Go."}).json()[
                    "run_id"
                ]
                _wait_for(lambda: len(hook.delivered()) == 1)
                [message] = hook.delivered()
                assert message.genuine(SECRET)
                payload = message.payload
                assert payload["run_id"] == run_id and payload["tool"] == "drop_table"
                link = urlsplit(payload["link"])
                assert payload["link"].startswith("https://approvals.example/nb/approve/")
                [token] = parse_qs(link.query)["token"]
                path = link.path.removeprefix("/nb")
                assert path == f"/approve/{run_id}/{payload['approval_id']}"
                with httpx.Client(base_url=url, timeout=20) as anonymous:  # a link needs no bearer
                    verdict = anonymous.post(path, json={"approve": True, "token": token})
                assert verdict.status_code == 200, verdict.text
                _wait_for(lambda: http.get(f"/runs/{run_id}").json()["state"] == "completed")
        finally:
            _stop(process)
        assert [r.status for r in hook.all()] == [500, 200]


def test_serve_without_links_and_without_a_secret(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/runs.db"
    with receiver() as hook:
        process, url = _serve(
            store,
            "--notify-url",
            hook.url,
            "--notify-without-links",
            "--public-url",
            "https://approvals.example/nb",
            env=_env(),
        )
        try:
            auth = {"Authorization": "Bearer cli-token"}
            with httpx.Client(base_url=url, headers=auth, timeout=20) as http:
                http.post("/runs", json={"agent": "janitor", "prompt": "Go."})
                _wait_for(lambda: len(hook.delivered()) == 1)
            assert "link" not in hook.delivered()[0].payload
            assert "approve/" not in hook.delivered()[0].payload["text"]
        finally:
            _stop(process)
    env = _env()
    del env["NBDURABLE_NOTIFY_SECRET"]
    command = [sys.executable, "-m", "nbdurable.cli", "serve", "--store", store]
    command += ["--agents", "server.agents:agents", "--notify-url", "http://127.0.0.1:9/x"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2
    assert "NBDURABLE_NOTIFY_SECRET" in done.stderr
