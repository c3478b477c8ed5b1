"""The parts under the engine: the server starts on free ports, an endpoint registers, a
handler's ``ctx.run`` steps are journaled; bad addresses and refused deployments are
one line and a typed error, and no run changes.

(No ``__init__.py`` in this directory: ``tests/`` is on the workers' ``PYTHONPATH``,
and a package ``tests/restate`` would hide the Restate SDK, ``restate``.)"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from pathlib import Path

import pytest
import restate
from support.restate_server import restate_server as restate_server  # the fixture
from support.temporal_agents import agents as test_agents
from support.waiting import eventually

import nbdurable as nd
from nbdurable.cli import main
from nbdurable.restate import (
    RestateDeploymentError,
    RestateEngine,
    RestateServer,
    RestateUnavailableError,
    _admin,
)
from nbdurable.restate._devserver import free_port
from nbdurable.restate._endpoint import serving
from nbdurable.runtime import DurableRuntime

counter = restate.VirtualObject("smoke")
ran: list[int] = []


@counter.handler()
async def twice(ctx: restate.ObjectContext, n: int) -> list[int]:
    """Two journaled steps."""

    def one(k: int) -> int:
        ran.append(k)
        return k

    first = await ctx.run_typed("one", one, restate.RunOptions(), n)
    second = await ctx.run_typed("two", one, restate.RunOptions(), n + 1)
    return [first, second]


def _invoke(ingress: str, target: str, body: object) -> object:
    import urllib.request

    request = urllib.request.Request(
        f"{ingress}/{target}", data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


async def test_an_endpoint_registers_and_its_steps_run_once(restate_server: RestateServer) -> None:
    port = free_port()
    async with serving(restate.app([counter]), f"127.0.0.1:{port}"):
        uri = f"http://127.0.0.1:{port}"
        deployment = await asyncio.to_thread(_admin.register, restate_server.admin, uri)
        assert deployment.startswith("dp_")
        key = f"smoke/{uuid.uuid4().hex}/twice"
        answer = await asyncio.to_thread(_invoke, restate_server.ingress, key, 3)
    assert answer == [3, 4] and ran[-2:] == [3, 4]


async def test_a_server_not_running_is_one_line_and_a_typed_error() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RestateUnavailableError, match=f"no Restate server answers at {nowhere}"):
        await asyncio.to_thread(_admin.register, nowhere, "http://127.0.0.1:1")
    assert isinstance(RestateUnavailableError("x"), nd.NbdurableError)


async def test_a_refused_deployment_names_the_server_and_the_endpoint(
    restate_server: RestateServer,
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RestateDeploymentError) as refused:
        await asyncio.to_thread(_admin.register, restate_server.admin, dead)
    line = str(refused.value)
    assert "\n" not in line and restate_server.admin in line and dead in line


async def test_a_wrong_ingress_leaves_the_run_pending_and_says_so_once(tmp_path: Path) -> None:
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("nbdurable")
    logger.addHandler(handler)
    logger.setLevel(logging.ERROR)  # tests/conftest.py quiets it to CRITICAL
    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    nowhere = f"http://127.0.0.1:{free_port()}"
    engine = RestateEngine(nowhere, nowhere)
    async with DurableRuntime(store=store, agents=test_agents, engine=engine) as rt:
        run = await rt.submit("janitor", "Clean up.", run_id="run-nowhere")
        await asyncio.sleep(1.0)  # many dispatch periods
        record = store.rt_get("run-nowhere")
        assert run.record().state == "pending"
    assert record.state == "pending" and record.fence == 0 and record.lease_owner is None
    logging.getLogger("nbdurable").removeHandler(handler)
    said = [line for line in said if "Restate dispatch failed" in line]
    assert len(said) == 1 and nowhere in said[0], said
    store.close()


def test_the_worker_against_a_wrong_admin_address_exits_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    code = main(
        [
            "worker",
            "--engine",
            "restate",
            "--admin",
            nowhere,
            "--store",
            f"sqlite:///{tmp_path / 'runs.db'}",
            "--agents",
            "support.temporal_agents:agents",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and nowhere in err[0] and "Restate" in err[0], err


async def test_the_dispatcher_waits_for_an_endpoint(
    restate_server: RestateServer, tmp_path: Path
) -> None:
    """No endpoint registered the run's definition: nothing is sent, the run stays pending."""
    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    engine = RestateEngine(restate_server.ingress, restate_server.admin)
    async with DurableRuntime(store=store, agents=test_agents, engine=engine) as rt:
        await rt.submit("janitor", "Clean up.", run_id="run-unserved")
        await asyncio.sleep(0.5)
    await eventually(lambda: store.rt_get("run-unserved").state == "pending", timeout=5)
    store.close()
