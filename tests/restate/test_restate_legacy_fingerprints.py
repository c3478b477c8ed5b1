"""Runs recorded under the previous fingerprint scheme reach an endpoint whose definition
accepts them: endpoints register their objects under the current scheme, so the sender
translates the old digest through its own registration (the old scheme recomputed with
the run's own settings) before it picks the virtual object."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from stores.fixtures import store_agents as sa
from support.restate_legacy_agents import agents as quiet
from support.restate_server import restate_server as restate_server  # the fixture

import nbdurable as nd
from nbdurable.restate import RestateEngine, RestateServer
from nbdurable.restate._config import run_service
from nbdurable.restate._devserver import free_port, start_endpoint, stop_process
from nbdurable.restate._engine import service_of
from nbdurable.runs import RuntimeRun
from nbdurable.runtime import Agent, DurableRuntime
from nbdurable.runtime._fingerprint import legacy_fingerprint

ROOT = Path(__file__).resolve().parents[2]
OLD_STORE = ROOT / "tests" / "stores" / "fixtures" / "5faba37.sqlite"
QUIET = Agent("quiet", nd.ScriptedModel(["ok"]), version="1", stream=False)


def _run(fingerprint: str | None, *, stream: bool = False) -> RuntimeRun:
    return RuntimeRun(
        run_id="r1",
        session_id="s1",
        agent_id="quiet",
        agent_version="1",
        prompt="[]",
        state="pending",
        created_at=1,
        updated_at=1,
        fingerprint=fingerprint,
        stream=stream,
        max_steps=QUIET.max_steps,
    )


def test_an_old_fingerprint_goes_to_the_object_of_the_definition_that_accepts_it() -> None:
    definitions = DurableRuntime(store=nd.open_store("memory://"), agents=[QUIET]).registry
    current = run_service("quiet", "1", QUIET.fingerprint())
    old = legacy_fingerprint(QUIET, stream=True, max_steps=QUIET.max_steps)  # streamed, then
    assert service_of(_run(old, stream=True), definitions.definitions()) == current
    assert service_of(_run(QUIET.fingerprint()), definitions.definitions()) == current
    # another definition's old digest: the object it names, which nobody registers
    other = legacy_fingerprint(
        Agent("quiet", nd.ScriptedModel(["no"]), version="1"), stream=False, max_steps=20
    )
    assert service_of(_run(other), definitions.definitions()) == run_service("quiet", "1", other)
    assert service_of(_run(old, stream=True)) == run_service("quiet", "1", old)  # no registry


async def test_a_run_recorded_under_the_old_scheme_runs_on_restate(
    restate_server: RestateServer, tmp_path: Path
) -> None:
    """The old store's pending run (no engine recorded, an old-scheme digest) completes
    on an endpoint registering the same agents without streaming."""
    copy = tmp_path / "old.sqlite"
    shutil.copy(OLD_STORE, copy)
    url = f"sqlite:///{copy}"
    store = nd.open_store(url)
    servers = (restate_server.ingress, restate_server.admin)
    env = {"NBDURABLE_APPROVAL_SECRET": sa.SECRET, "PYTHONPATH": str(ROOT / "tests")}
    agents = "support.restate_legacy_agents:agents"
    worker = start_endpoint(restate_server, url, agents, f"127.0.0.1:{free_port()}", env)
    try:
        old = store.rt_get("rt-pending")
        assert old.engine is None and old.fingerprint is not None and len(old.fingerprint) == 64
        engine = RestateEngine(*servers)
        runtime = DurableRuntime(
            store=store, agents=quiet, engine=engine, approval_signer=nd.ApprovalSigner(sa.SECRET)
        )
        async with runtime as rt:
            pending = await rt.get_run("rt-pending")
            assert (await asyncio.wait_for(pending.result(), 60)).text == "First answer."
    finally:
        stop_process(worker)
        store.close()
