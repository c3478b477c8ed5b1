"""A drain that begins in the same step as a wake-up of the scheduler still ends.

The scheduler waits for work with ``asyncio.wait_for(wake.wait(), poll_interval)``.
On Python 3.11 that swallows a cancellation arriving once the wake-up is in
(the event set in the same step): a drain relying on the cancellation alone
waited for the scheduler for ever, and a stopping worker was killed after its
grace period. The drain must end within its seconds whatever the timing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import nbdurable as nd
from nbdurable.runtime import DurableRuntime
from nbdurable.runtime._engine import EmbeddedEngine


async def test_a_drain_begun_with_a_wake_up_pending_ends(tmp_path: Path) -> None:
    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    runtime = await DurableRuntime.open(store=store, agents=[], poll_interval=10.0)
    engine = runtime.engine
    assert isinstance(engine, EmbeddedEngine)
    await asyncio.sleep(0.3)  # the scheduler has looked for work and waits for a wake-up

    async def stop() -> list[str]:
        engine.wake()  # e.g. a run that just finished, or a notification
        return await engine.drain(0.5)  # its cancel comes in that same step

    stopping = asyncio.get_running_loop().create_task(stop())
    done, _ = await asyncio.wait({stopping}, timeout=10)
    try:
        assert done, "the drain still waits for the scheduler after 10 s"
        assert stopping.result() == []
    finally:
        await runtime.close()  # ends a scheduler that kept going, so the test ends
        stopping.cancel()
        store.close()


async def test_the_engine_claims_nothing_once_a_drain_began(tmp_path: Path) -> None:
    """After the drain the scheduler is done: a run submitted then stays `pending`."""
    from support import runtime_agents

    store = nd.open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    runtime = await DurableRuntime.open(
        store=store, agents=runtime_agents.agents, poll_interval=0.02
    )
    engine = runtime.engine
    assert isinstance(engine, EmbeddedEngine)
    try:
        engine.wake()
        await asyncio.wait_for(engine.drain(0.5), 10)
        run = await runtime.submit("sleeper", "nap")
        await asyncio.sleep(0.3)  # fifteen polling intervals
        assert run.record().state == "pending"
    finally:
        await runtime.close()
        store.close()
