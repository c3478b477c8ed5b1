"""Request bodies with ``"\\udcff"`` escapes: JSON parses them to lone surrogates, which
no store can encode. The bridge answers as for any text (U+FFFD in their place), never 500."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nbdurable.stores._packing import unpack_json

from .harness import Server

GOOD = "a\ufffdb"


def _post(server: Server, path: str, raw: bytes) -> tuple[int, dict[str, object]]:
    with server.client() as http:
        response = http.post(path, content=raw, headers={"content-type": "application/json"})
    return response.status_code, response.json()


def test_submit_with_lone_surrogate_escapes_runs_with_replacement_characters(
    server: Server,
) -> None:
    status, run = _post(
        server,
        "/runs",
        b'{"agent": "helper", "prompt": "what is a\\udcffb?", "session_id": "s-a\\udcffb",'
        b' "request_id": "r-\\udcff"}',
    )
    assert status == 201, run
    assert run["session_id"] == f"s-{GOOD}" and run["request_id"] == "r-\ufffd"
    record = server.wait_state(str(run["run_id"]), "completed")
    assert record.prompt_value == f"what is {GOOD}?"
    # a message prompt, and the same raw request id deduplicates to the same run
    status, again = _post(
        server,
        "/runs",
        b'{"agent": "helper", "prompt": "what is a\\udcffb?", "request_id": "r-\\udcff"}',
    )
    assert status == 201 and again["run_id"] == run["run_id"]
    status, message_run = _post(
        server,
        "/runs",
        b'{"agent": "helper", "prompt": {"role": "user", "content": "x \\ud83d\\ude00 \\udcff"}}',
    )
    assert status == 201, message_run
    record = server.wait_state(str(message_run["run_id"]), "completed")
    assert record.prompt_value.text == "x \U0001f600 \ufffd"


def test_unknown_agent_with_lone_surrogate_is_a_typed_error(server: Server) -> None:
    status, body = _post(server, "/runs", b'{"agent": "x\\udcff", "prompt": "hi"}')
    assert status == 422 and body["error"]["type"] == "ConfigurationError"
    assert body["error"]["message"].startswith("no agent 'x\ufffd' is registered")


def test_deny_reason_with_lone_surrogates_reaches_the_model(server: Server) -> None:
    with server.client() as http:
        run_id = http.post("/runs", json={"agent": "janitor", "prompt": "Clean up."}).json()[
            "run_id"
        ]
        server.wait_state(run_id, "waiting_approval")
        [approval] = http.get(f"/runs/{run_id}/approvals").json()
    status, body = _post(
        server,
        f"/runs/{run_id}/approvals/{approval['approval_id']}",
        b'{"approve": false, "reason": "prod a\\udcffb"}',
    )
    assert status == 200, body
    record = server.wait_state(run_id, "completed")
    assert record.result_text is not None and f"prod {GOOD}" in record.result_text


def test_stored_text_is_valid_utf8(server: Server, tmp_path: Path) -> None:
    status, run = _post(server, "/runs", b'{"agent": "helper", "prompt": "a\\udcffb"}')
    assert status == 201
    server.wait_state(str(run["run_id"]), "completed")
    [database] = tmp_path.glob("runs-*.db")
    conn = sqlite3.connect(database)
    conn.text_factory = bytes
    try:
        for table, column in [("rt_runs", "record"), ("events", "payload"), ("nodes", "message")]:
            for value, kind in conn.execute(f"SELECT {column}, typeof({column}) FROM {table}"):
                if kind == b"blob":  # JSON the SQLite store packed
                    value = unpack_json(value).encode()
                value.decode("utf-8")  # strict
                assert b"\\udcff" not in value
    finally:
        conn.close()
