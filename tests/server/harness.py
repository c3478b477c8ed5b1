"""The bridge on a real socket: uvicorn in a thread on 127.0.0.1, a random port.

The runtime is opened on the server thread's loop (as ``nbdurable serve`` does);
tests talk to it over HTTP with httpx, and reach the runtime or the store only
through ``server.call(coroutine)``, which runs on that loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx

import nbdurable as nd
from nbdurable.server import build_server
from nbdurable.server._serving import bound_url

from . import agents as test_agents

TOKEN = "test-bearer-token-0123456789"


@dataclass
class Server:
    """A running bridge."""

    url: str
    token: str | None
    runtime: Any
    loop: asyncio.AbstractEventLoop
    uvicorn: Any
    thread: threading.Thread
    clock: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    def client(self, *, auth: bool = True, **options: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if auth and self.token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=20, **options)

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 20) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def run(self, fn: Callable[[], Any]) -> Any:
        async def wrapped() -> Any:
            return fn()

        return self.call(wrapped())

    def events(self, run_id: str) -> list[Any]:
        return list(self.call(nd.events.read_events(self.runtime.store, run_id)))

    def record(self, run_id: str) -> Any:
        return self.run(lambda: self.runtime.runtime_store.rt_get(run_id))

    def wait_state(self, run_id: str, *states: str, timeout: float = 20) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.record(run_id)
            if record.state in states:
                return record
            time.sleep(0.02)
        raise AssertionError(f"{run_id} is {self.record(run_id).state}, not {states}")

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(15)
        assert not self.thread.is_alive(), "the server thread did not stop"


def start_server(
    store_url: str,
    *,
    token: str | None = TOKEN,
    runtime_options: dict[str, Any] | None = None,
    wrap: Callable[[Any], Any] | None = None,
    agents: Callable[[], list[Any]] | None = None,
    **app_options: Any,
) -> Server:
    """Start the bridge of a fresh runtime on ``store_url``; ``wrap(app)`` may mount it.

    ``agents`` is a factory of the agents it serves (default: tests/server/agents.py's).
    """
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        store = nd.open_store(store_url)
        runtime = await nd.DurableRuntime.open(
            store=store,
            agents=(agents or test_agents.agents)(),
            poll_interval=0.01,
            **(runtime_options or {}),
        )
        try:
            server = build_server(runtime, host="127.0.0.1", port=0, token=token, **app_options)
            if wrap is not None:
                server.config.app = wrap(server.config.app)
            box.update(server=server, runtime=runtime, loop=asyncio.get_running_loop())
            task = asyncio.ensure_future(server.serve())
            while not server.started and not task.done():
                await asyncio.sleep(0.01)
            ready.set()
            await task
        except BaseException as exc:
            box["error"] = exc
            raise
        finally:
            ready.set()
            await runtime.close()
            store.close()

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    assert ready.wait(20), "the server did not start"
    if "error" in box:
        raise box["error"]
    server = box["server"]
    return Server(
        url=bound_url(server),
        token=token,
        runtime=box["runtime"],
        loop=box["loop"],
        uvicorn=server,
        thread=thread,
    )
