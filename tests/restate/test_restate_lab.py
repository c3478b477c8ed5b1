"""The seed's Restate lab: an endpoint SIGKILLed mid-stream, restarted; Restate resumes the
leg from its journal; a subscriber that was reading the stream reconnects by offset and
reads every event once, in order. The killed attempt's tokens are discarded as on Temporal:
the completed step does not run again and the answer is the model's, whole."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from support.executions import tool_rows
from support.restate_lab_agents import ANSWER
from support.restate_lab_agents import agents as lab_agents
from support.restate_server import restate_server as restate_server  # the fixture
from support.seed_consumer import ConsumerCrash, SeedConsumer, assert_read_the_whole_log, polling
from support.waiting import eventually
from support.workers import Worker

import nbdurable as nd
from nbdurable.restate import RestateEngine, RestateServer
from nbdurable.restate._devserver import free_port
from nbdurable.runtime import DurableRuntime

LAB = ["--agents", "support.restate_lab_agents:agents"]


async def test_sigkill_mid_stream_restart_resume_and_reconnect_by_offset(
    restate_server: RestateServer, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    store = nd.open_store(url)
    tools = tmp_path / "tools.db"
    servers = (restate_server.ingress, restate_server.admin)
    listen = ["--listen", f"127.0.0.1:{free_port()}"]
    env = {"NBDURABLE_TEST_TOOLS": str(tools)}
    first = Worker(None, "", url, env, args=[*LAB, *listen], restate=servers)
    engine = RestateEngine(*servers)
    second: Worker | None = None
    try:
        async with DurableRuntime(store=store, agents=lab_agents, engine=engine) as rt:
            run = await rt.submit("lab", "Stream a long answer.")
            consumer = SeedConsumer()
            consumer.save_run_id(run.run_id)

            def deltas() -> int:
                return sum(e.type == "model_delta" for e in store.read_events(run.run_id))

            await eventually(lambda: deltas() >= 10, timeout=30)  # mid-stream
            first.kill()
            with contextlib.suppress(ConsumerCrash):  # the subscriber reads up to here, dies
                await asyncio.wait_for(consumer.consume(polling(store), crash_after=8), 10)
            second = Worker(None, "", url, env, args=[*LAB, *listen], restate=servers)
            result = await asyncio.wait_for(run.result(), 60)
            await asyncio.wait_for(consumer.consume(polling(store)), 30)  # reconnects by offset
        assert result.text == ANSWER
        log = list(store.read_events(run.run_id))
        assert_read_the_whole_log(consumer, log)
        assert [e.offset for e in log] == list(range(1, len(log) + 1))
        saved = [e.step_index for e in log if e.type == "checkpoint_saved"]
        assert len(saved) == len(set(saved)), saved  # the resumed leg wrote nothing twice
        assert [tool for tool, _ in tool_rows(tools)] == ["step"]  # journaled: never again
    finally:
        first.stop()
        if second is not None:
            second.stop()
        store.close()
