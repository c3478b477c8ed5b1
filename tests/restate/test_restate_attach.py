"""A client learns of a run's end when the leg's invocation ends (Restate's attach), not at
its next poll of a SQLite store that another process wrote: ``result()`` returns within a
fraction of the poll's one-second cap after the endpoint wrote the run's end."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import restate
from support.restate_server import restate_server as restate_server  # the fixture
from support.temporal_agents import agents as test_agents
from support.workers import Worker

import nbdurable as nd
from nbdurable.restate import RestateEngine, RestateServer, _admin
from nbdurable.restate._attach import await_end
from nbdurable.restate._devserver import free_port
from nbdurable.restate._endpoint import serving
from nbdurable.runtime import DurableRuntime

pause = restate.VirtualObject("attach_pause")


@pause.handler()
async def nap(ctx: restate.ObjectContext, seconds: float) -> float:
    """A step that takes ``seconds``."""

    async def sleep() -> float:
        await asyncio.sleep(seconds)
        return seconds

    return await ctx.run_typed("nap", sleep, restate.RunOptions())


async def test_await_end_returns_when_the_invocation_ends(restate_server: RestateServer) -> None:
    port = free_port()
    async with serving(restate.app([pause]), f"127.0.0.1:{port}"):
        await asyncio.to_thread(_admin.register, restate_server.admin, f"http://127.0.0.1:{port}")
        target = f"attach_pause/{uuid.uuid4().hex}/nap"
        invocation = _admin.send(restate_server.ingress, target, 0.5, uuid.uuid4().hex)
        assert invocation is not None
        started = time.perf_counter()
        assert await await_end(restate_server.ingress, invocation) == 200
        assert time.perf_counter() - started >= 0.3  # it waited for the step
        again = time.perf_counter()
        assert await await_end(restate_server.ingress, invocation) == 200  # ended: at once
        assert time.perf_counter() - again < 1
    assert await await_end(f"http://127.0.0.1:{free_port()}", invocation) is None  # no server


async def test_result_returns_soon_after_the_endpoint_wrote_the_end(
    restate_server: RestateServer, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = nd.open_store(url)
    servers = (restate_server.ingress, restate_server.admin)
    # ~2.05 s: half-way between two polls 1 s apart (backoff), were the end missed
    worker = Worker(None, "", url, {"NBDURABLE_TEST_SLOW": "1.95"}, restate=servers)
    try:
        engine = RestateEngine(*servers)
        async with DurableRuntime(store=store, agents=test_agents, engine=engine) as rt:
            run = await rt.submit("crashy", "Do the three steps.")
            result = await asyncio.wait_for(run.result(), 60)
            noticed = time.time() * 1000
        assert result.text == "All three steps done."
        late = noticed - store.rt_get(run.run_id).updated_at
        assert late < 300, f"result() returned {late:.0f} ms after the run ended"
    finally:
        worker.stop()
        store.close()
