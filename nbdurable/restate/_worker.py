"""``nbdurable worker --engine restate``: the agents served as a Restate SDK endpoint.

The endpoint (an ASGI app served by Hypercorn) registers its deployment with the
server's admin API, then executes the legs Restate invokes. Its runtime runs a
:class:`~nbdurable.restate._engine.RestateEngine` with ``adopt_after`` (pending
runs no client sent) and a :class:`~nbdurable.restate._failover.Failover` that
takes over the deployments of endpoints that died serving the same
definitions, so their invocations (pinned to a deployment) continue here.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from ..runtime import _lifecycle as lifecycle
from ..runtime._runtime import DurableRuntime
from . import _admin
from ._devserver import free_port
from ._endpoint import serving
from ._engine import RestateEngine
from ._failover import Failover
from ._handler import in_flight, run_objects, set_endpoint_runtime, stop_taking_steps
from ._tasks import task_objects

if TYPE_CHECKING:
    from ..durable.store import HistoryStore
    from ..runtime._agent import Agent
    from ..runtime._limits import Limits
    from ..runtime._notify import Notifier
    from ..runtime._tasks import TaskDefinition

__all__ = ["ADOPT_AFTER", "serve"]

ADOPT_AFTER = 2.0
"""Seconds a run stays pending before an endpoint sends it (clients go first)."""


def _print(line: str) -> None:
    print(line, flush=True)


async def serve(
    *,
    ingress: str,
    admin: str,
    store: HistoryStore,
    agents: Iterable[Agent],
    tasks: Sequence[TaskDefinition] = (),
    limits: Limits | None = None,
    listen: str = "127.0.0.1:0",
    advertise: str | None = None,
    ready: str | None = None,
    drain_seconds: float = 0.0,
    notify: Notifier | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    """Serve the agents as a Restate endpoint until SIGTERM or SIGINT.

    ``listen``: where the endpoint binds (port 0: a free one); ``advertise``: the
    URL the server reaches it at (default ``http://`` + ``listen``). ``ready`` is
    said once the deployment is registered (``{uri}`` in it is the endpoint's).
    The first signal stops taking work and lets the legs in flight finish their
    step for up to ``drain_seconds``; a step cut then, or after a second signal,
    runs again where Restate invokes the leg next (its intent decides).
    ``tasks``: custom tasks it executes too (a virtual object per task version).

    Raises:
        RestateUnavailableError: No admin API answers at ``admin``.
        RestateDeploymentError: The server refused the deployment.
    """
    host, _, port = listen.rpartition(":")
    bind = f"{host or '127.0.0.1'}:{int(port) or free_port()}"
    uri = advertise or f"http://{bind}"
    engine = RestateEngine(ingress, admin, adopt_after=ADOPT_AFTER)
    runtime = DurableRuntime(
        store=store,
        agents=agents,
        tasks=tasks,
        engine=engine,
        limits=limits,
        notify=notify,
        record_mirror=False,
    )
    set_endpoint_runtime(runtime)
    import restate

    app = restate.app([*run_objects(runtime), *task_objects(runtime)])
    from restate.server import install_shutdown_hook

    stop, hurry = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        (hurry if stop.is_set() else stop).set()

    # The SDK's app takes SIGTERM's one asyncio handler at its first request; its
    # hooks are how two parties share it.
    install_shutdown_hook(loop, on_signal, signal.SIGTERM)
    loop.add_signal_handler(signal.SIGINT, on_signal)
    try:
        async with serving(app, bind):
            deployment = await asyncio.to_thread(_admin.register, admin, uri)
            failover = Failover(admin, uri, deployment)
            await runtime.__aenter__()
            watching = loop.create_task(failover.watch())
            try:
                if ready:
                    (say or _print)(ready.format(uri=uri))
                await stop.wait()
                (say or _print)(f"nbdurable worker draining (up to {drain_seconds:g} s)")
                watching.cancel()
                stop_taking_steps()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(runtime.engine.close(), 10)
                await _drain(drain_seconds, hurry)
            finally:
                watching.cancel()
                for run_id, call in in_flight():
                    lifecycle.cut(run_id, call)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(runtime.close(), 10)
    finally:
        # A loop left holding them (a caller's, in tests) fails to reset them from
        # the thread that collects it; SIGTERM's is usually gone with the endpoint
        # (serving), not when binding failed.
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    with contextlib.suppress(Exception):
        store.close()
    return 0


async def _drain(seconds: float, hurry: asyncio.Event) -> None:
    """Wait until no step is in flight, ``seconds`` pass, or a second signal comes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while in_flight() and loop.time() < deadline and not hurry.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hurry.wait(), min(0.05, max(deadline - loop.time(), 0)))
