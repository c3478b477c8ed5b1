"""The AG-UI endpoints on the Temporal engine: a bridge whose runtime dispatches to a
`nbdurable worker --engine temporal` process on the real dev server. The log a
Temporal leg writes projects onto the same valid AG-UI runs, and a resume entry
decides the call there too."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("temporalio", reason="the temporal extra is not installed")

from support import temporal_agents
from support.workers import Worker

from nbdurable.temporal import TemporalEngine

from .agui_client import approve, check_lifecycle, interrupts, read, resume_body
from .harness import start_server


def test_a_temporal_run_is_followed_and_decided_through_agui(
    temporal_server: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        temporal_server, queue, url, {"NBDURABLE_TEST_TOOLS": str(tmp_path / "tools.db")}
    )
    server = start_server(
        url,
        agents=lambda: list(temporal_agents.agents),
        runtime_options={"engine": TemporalEngine(address=temporal_server, task_queue=queue)},
    )
    try:
        with server.client() as http:
            submitted = http.post("/runs", json={"agent": "janitor", "prompt": "Clean up."})
            assert submitted.status_code == 201, submitted.text
            run_id = submitted.json()["run_id"]
            first = read(http, run_id, until="stop")
            [interrupt] = interrupts(first)
            answered = http.post(
                f"/agui/runs/{run_id}/resume", json=resume_body(run_id, approve(interrupt))
            )
            assert answered.status_code == 200, answered.text
            rest = read(http, run_id, headers={"Last-Event-ID": first[-1].id})
    finally:
        server.stop()
        worker.stop()
    check_lifecycle(first + rest)
    results = {
        e.data["toolCallId"]: e.data["content"] for e in rest if e.type == "TOOL_CALL_RESULT"
    }
    assert results[interrupt["toolCallId"]] == "dropped stg_2023"
    assert rest[-1].data["outcome"] == {"type": "success"}
    assert rest[-1].data["result"] == "Done: dropped stg_2023."
