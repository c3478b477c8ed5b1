"""No approval-link token in any log line: uvicorn's access and error lines, ours, tracebacks.

``nbdurable serve`` at every log level and in both formats, over real HTTP: the
link's page is fetched and its verdict posted, and the link's token appears
nowhere on stdout or stderr while the access line of the request is there,
its ``token=`` masked. The filter itself masks a record's message, arguments,
exception and stack.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from nbdurable._redact import MASK, RedactSecrets, redact

from .harness import Server

TESTS = Path(__file__).resolve().parents[1]
SECRET = "v1.c2VjcmV0LXRva2VuLXZhbHVl.AbCdEf-123_xyz"


def _formatted(record: logging.LogRecord) -> str:
    RedactSecrets().filter(record)
    return logging.Formatter("%(message)s").format(record)


def _record(msg: object, args: tuple[object, ...] = (), exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ConnectionError(f"GET http://h/approve/r/a?token={SECRET} failed")
        except ConnectionError:
            exc_info = sys.exc_info()
    return logging.LogRecord("x", logging.INFO, __file__, 1, msg, args, exc_info)


@pytest.mark.parametrize(
    "text",
    [
        f'127.0.0.1:5000 - "GET /approve/run-1/ap-1?token={SECRET} HTTP/1.1" 200',
        f"POST http://bridge.example/approve/r/a?x=1&token={SECRET}#frag",
        f"Authorization: Bearer {SECRET}",
        f"postgresql://ana:{SECRET}@db:5432/runs",
        f"host=db password={SECRET} dbname=runs",
        f"https://hooks.example/x?api_key={SECRET}&access_token={SECRET}",
    ],
)
def test_secrets_are_masked_in_a_line(text: str) -> None:
    masked = redact(text)
    assert SECRET not in masked and MASK in masked


def test_a_line_without_secrets_is_left_as_it_is() -> None:
    text = '127.0.0.1:5000 - "GET /runs/r/events?after=17&until=stop HTTP/1.1" 200'
    assert redact(text) is text or redact(text) == text


def test_the_filter_masks_arguments_messages_and_tracebacks_keeping_argument_types() -> None:
    # uvicorn's access formatter unpacks its five arguments: they stay five, the status an int
    access = _record(
        '%s - "%s %s HTTP/%s" %d', ("127.0.0.1:1", "GET", f"/a?token={SECRET}", "1.1", 200)
    )
    RedactSecrets().filter(access)
    assert isinstance(access.args, tuple) and access.args[4] == 200
    assert SECRET not in access.getMessage() and "token=[redacted]" in access.getMessage()
    assert SECRET not in _formatted(_record(f"link: /approve/r/a?token={SECRET}"))
    assert SECRET not in _formatted(_record("failed: %r", (ValueError(f"?token={SECRET}"),)))
    failed = _record("a request failed", exc=True)
    shown = _formatted(failed)
    assert "ConnectionError" in shown and SECRET not in shown
    from nbdurable.cli._logs import JsonFormatter

    assert SECRET not in JsonFormatter().format(failed)


def test_the_filter_masks_extra_fields_that_json_lines_show() -> None:
    from nbdurable.cli._logs import JsonFormatter

    failed = _record("run %s failed", ("run-1",))
    failed.reason = f"the webhook http://h/approve/r/a?token={SECRET} refused"  # extra={...}
    failed.run_id = "run-1"
    line = json.loads(JsonFormatter().format(_redacted(failed)))
    assert SECRET not in json.dumps(line) and "token=[redacted]" in line["reason"]
    assert line["run_id"] == "run-1"


def _redacted(record: logging.LogRecord) -> logging.LogRecord:
    RedactSecrets().filter(record)
    return record


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["NBDURABLE_SERVER_TOKEN"] = "redaction-bearer-token"
    return env


def _serve(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable, "-m", "nbdurable.cli", "serve", "--store", f"sqlite:///{tmp_path}/r.db",
        "--agents", "server.agents:agents", "--port", "0", "--poll-interval", "0.01", *extra,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise AssertionError(process.communicate(timeout=10))
    url = json.loads(line)["url"] if line.startswith("{") else line.split()[2]
    return process, url


def _decide_by_link(url: str) -> str:
    """A run waits for approval; its link's page is fetched and its verdict posted: the token."""
    auth = {"Authorization": "Bearer redaction-bearer-token"}
    with httpx.Client(base_url=url, headers=auth, timeout=20) as http:
        run_id = http.post("/runs", json={"agent": "janitor", "prompt": "Clean up."}).json()[
            "run_id"
        ]
        for _ in range(500):
            if http.get(f"/runs/{run_id}").json()["state"] == "waiting_approval":
                break
            time.sleep(0.02)
        [approval] = http.get(f"/runs/{run_id}/approvals").json()
    link = approval["link"]
    token = parse_qs(urlsplit(link).query)["token"][0]
    path = urlsplit(link).path
    with httpx.Client(base_url=url, timeout=20) as anonymous:  # as someone following the link
        assert anonymous.get(f"{path}?token={token}").status_code == 200
        assert anonymous.get(f"{path}?token={token}x").status_code in (403, 200)
        decided = anonymous.post(path, json={"approve": True, "token": token})
        assert decided.status_code == 200, decided.text
    return token


def _stop(process: subprocess.Popen[str]) -> tuple[str, str]:
    process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize(
    ("level", "log_format"), [("DEBUG", "json"), ("info", "text"), ("Info", "json")]
)
def test_serve_logs_no_link_token_at_any_level(tmp_path: Path, level: str, log_format: str) -> None:
    process, url = _serve(tmp_path, "--log-level", level, "--log-format", log_format)
    try:
        token = _decide_by_link(url)
    finally:
        out, err = _stop(process)
    everything = out + err
    assert token not in everything, everything
    assert token[:24] not in everything  # not even a prefix of it
    assert "redaction-bearer-token" not in everything
    access = [line for line in everything.splitlines() if "GET /approve/" in line]
    assert len(access) == 2 and all("?token=[redacted]" in line for line in access), everything
    if log_format == "json":
        lines = [json.loads(line) for line in everything.splitlines()]
        assert any(line["logger"] == "uvicorn.access" for line in lines)


def test_a_bridge_with_uvicorns_own_handlers_masks_link_tokens(
    make_server: object, capfd: pytest.CaptureFixture[str]
) -> None:
    """``build_server`` in a program of its own: uvicorn's default log config, access at info."""
    server: Server = make_server(token="redaction-bearer-token", log_level="info")  # type: ignore[operator]
    token = _decide_by_link(server.url)
    out, err = capfd.readouterr()
    assert token not in out + err
    assert any("token=[redacted]" in line for line in (out + err).splitlines()), out + err
