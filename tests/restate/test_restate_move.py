"""`nbdurable runs move --engine restate` hands a run no one executes to Restate: a run
submitted for the embedded engine, with no embedded worker, is moved and a Restate
endpoint's dispatch finishes it; a finished run is not moved back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from support.restate_server import restate_server as restate_server  # the fixture
from support.temporal_agents import agents as test_agents
from support.workers import Worker

import nbdurable as nd
from nbdurable.cli import main
from nbdurable.restate import RestateServer
from nbdurable.runtime import DurableRuntime


def test_a_moved_embedded_run_is_finished_by_a_restate_endpoint(
    restate_server: RestateServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store: Any = nd.open_store(url)
    servers = (restate_server.ingress, restate_server.admin)

    async def submit() -> None:
        # submitted for the embedded engine; nothing in this process executes it
        await DurableRuntime(store=store, agents=test_agents).submit(
            "crashy", "Do the three steps.", run_id="run-e"
        )

    async def answer() -> str:
        run = await DurableRuntime(store=store, agents=test_agents).get_run("run-e")
        return (await asyncio.wait_for(run.result(), 10)).text

    worker = None
    try:
        asyncio.run(submit())
        assert store.rt_get("run-e").engine == "embedded"
        worker = Worker(None, "", url, {}, restate=servers)
        time.sleep(0.5)  # a Restate endpoint does not take the embedded engine's run
        assert store.rt_get("run-e").state == "pending"

        assert main(["runs", "move", "run-e", "--engine", "restate", "--store", url]) == 0
        assert "moved to the restate engine" in capsys.readouterr().out
        deadline = time.monotonic() + 60
        while store.rt_get("run-e").state != "completed" and time.monotonic() < deadline:
            time.sleep(0.1)
        record = store.rt_get("run-e")
        assert (record.state, record.engine) == ("completed", "restate")
        assert asyncio.run(answer()) == "All three steps done."

        assert main(["runs", "move", "run-e", "--engine", "embedded", "--store", url]) == 1
        assert "not moved, it is completed" in capsys.readouterr().err
        assert store.rt_get("run-e").engine == "restate"
    finally:
        if worker is not None:
            worker.stop()
        store.close()
