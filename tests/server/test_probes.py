"""``nbdurable serve``'s /metrics, /healthz and /readyz: no token, no run content, out of the
OpenAPI schema, or on a port of their own with ``--metrics-port``; JSON log lines."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

TESTS = Path(__file__).resolve().parents[1]


def _start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], list[str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["NBDURABLE_SERVER_TOKEN"] = "probe-token"
    command = [
        sys.executable, "-m", "nbdurable.cli", "serve", "--store", f"sqlite:///{tmp_path}/r.db",
        "--agents", "server.agents:agents", "--port", "0", "--poll-interval", "0.01", *extra,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    lines: list[str] = []
    while not any("nbdurable serve:" in line for line in lines):  # a text or JSON line
        line = process.stdout.readline()
        if not line:
            raise AssertionError(process.communicate(timeout=10))
        lines.append(line)
    return process, lines


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
    return err


def _metric(text: str, name: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    )


def test_probe_routes_need_no_token_and_reveal_no_run_content(tmp_path: Path) -> None:
    process, lines = _start(tmp_path, "--log-level", "info", "--log-format", "json")
    try:
        url = json.loads(next(line for line in lines if "nbdurable serve:" in line))["url"]
        assert httpx.get(f"{url}/runs").status_code == 401
        assert httpx.get(f"{url}/healthz").text == "ok\n"
        assert httpx.get(f"{url}/readyz").status_code == 200
        schema = httpx.get(f"{url}/openapi.json").json()
        assert not {"/metrics", "/healthz", "/readyz"} & set(schema["paths"])
        auth = {"Authorization": "Bearer probe-token"}
        with httpx.Client(base_url=url, headers=auth, timeout=20) as http:
            run_id = http.post("/runs", json={"agent": "janitor", "prompt": "Clean up."}).json()[
                "run_id"
            ]
            for _ in range(400):
                if http.get(f"/runs/{run_id}").json()["state"] == "waiting_approval":
                    break
                httpx.get(f"{url}/healthz")  # a short pause that needs no sleep
            waiting = httpx.get(f"{url}/metrics").text
            assert _metric(waiting, "nbdurable_store_approvals_pending") == 1
            assert run_id not in waiting and "stg_2023" not in waiting
            [approval] = http.get(f"/runs/{run_id}/approvals").json()
            http.post(
                f"/runs/{run_id}/approvals/{approval['approval_id']}",
                json={"approve": True, "token": approval["token"]},
            )
            for _ in range(400):
                if http.get(f"/runs/{run_id}").json()["state"] == "completed":
                    break
        done = httpx.get(f"{url}/metrics").text
        assert _metric(done, "nbdurable_approval_decision_seconds_count") == 1
        assert _metric(done, "nbdurable_runs_finished_total") == 1
        assert _metric(done, "nbdurable_store_approvals_pending") == 0
    finally:
        err = _stop(process)
    logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    events = {line.get("event") for line in logged if line.get("run_id") == run_id}
    assert {"claimed", "suspended", "decided", "resumed", "finished"} <= events, err
    assert all(line["agent"] == "janitor" for line in logged if line.get("run_id") == run_id)


def test_metrics_port_moves_the_probe_routes_off_the_api_port(tmp_path: Path) -> None:
    process, lines = _start(tmp_path, "--metrics-port", "0")
    try:
        text = "".join(lines)
        url = re.search(r"nbdurable serve: (\S+)", text).group(1)  # type: ignore[union-attr]
        probes = re.search(r"nbdurable metrics: (\S+)/metrics", text).group(1)  # type: ignore[union-attr]
        assert httpx.get(f"{url}/metrics").status_code in (401, 404)
        assert httpx.get(f"{probes}/healthz").text == "ok\n"
        assert httpx.get(f"{probes}/readyz").status_code == 200
        scraped = httpx.get(f"{probes}/metrics")
        assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert _metric(scraped.text, "nbdurable_store_up") == 1
    finally:
        _stop(process)
