"""Health and metrics endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

``nbdurable worker --metrics-port`` serves them with :func:`start_probe_server`
(asyncio, no web framework); ``nbdurable serve`` adds the same routes to its app.
They need no token and reveal no run content: metric values and labels,
``ok``, or which dependency does not answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import metrics as _metrics
from .durable.store import RuntimeStore

__all__ = [
    "Check",
    "ProbeServer",
    "ReadinessProbe",
    "start_probe_server",
    "store_check",
    "temporal_check",
]

_RENDER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="nbdurable-metrics")

Check = Callable[[], Awaitable[None]]
"""A readiness check: returns when its dependency answers, raises when not."""

CHECK_TIMEOUT_S = 3.0
"""How long ``/readyz`` waits for one check before calling its dependency unready."""


def store_check(store: RuntimeStore) -> Check:
    """A check that the store answers, bounded and independent of the runtime's store calls.

    The store's :meth:`~nbdurable.durable.store.RunStore.ping` answers:
    PostgreSQL's on a connection of its own, so the probe never queues behind
    the calls waiting for one of the pool's connections (during an outage, the
    runtime's retries); another store reads a run record, its waits inside the
    store bounded. The check runs on a thread of its own, one at a time: a
    probe arriving while the previous one still runs shares its answer.
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbdurable-readyz")
    busy: list[asyncio.Future[Any]] = []

    def probe() -> None:
        store.ping(CHECK_TIMEOUT_S)

    async def check() -> None:
        if not busy or busy[0].done():
            busy[:] = [asyncio.get_running_loop().run_in_executor(executor, probe)]
            # a probe nobody awaits any more (its waiter timed out) must not log its error
            busy[0].add_done_callback(_retrieve)
        await asyncio.wait_for(asyncio.shield(busy[0]), CHECK_TIMEOUT_S)

    return check


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def temporal_check(client: Any) -> Check:
    """A check that the Temporal frontend answers its health check."""

    async def check() -> None:
        healthy = await asyncio.wait_for(client.service_client.check_health(), CHECK_TIMEOUT_S)
        if not healthy:
            raise ConnectionError("the Temporal server reports itself unhealthy")

    return check


class ReadinessProbe:
    """The checks behind ``/readyz``, named (``store``, ``temporal``)."""

    def __init__(self, checks: Sequence[tuple[str, Check]] = ()) -> None:
        self.checks = list(checks)

    def add(self, name: str, check: Check) -> None:
        """Add a named check."""
        self.checks.append((name, check))

    async def failures(self) -> list[str]:
        """The names of the checks that fail now, with the kind of error (no detail)."""
        failed: list[str] = []
        for name, check in self.checks:
            try:
                await check()
            except Exception as exc:  # any failure means not ready; the type says which
                failed.append(f"{name}: {type(exc).__name__}")
        return failed


async def respond(path: str, probe: ReadinessProbe) -> tuple[int, str, bytes]:
    """``(status, content type, body)`` of a probe route, or 404."""
    body: bytes
    if path == "/healthz":
        return 200, "text/plain; charset=utf-8", b"ok\n"
    if path == "/readyz":
        failed = await probe.failures()
        if failed:
            text = "not ready: " + "; ".join(failed) + "\n"
            return 503, "text/plain; charset=utf-8", text.encode()
        return 200, "text/plain; charset=utf-8", b"ok\n"
    if path == "/metrics":
        # On a thread: the store-wide gauges may wait (a bounded time) for the
        # store, and the loop answers /readyz meanwhile.
        body = await asyncio.get_running_loop().run_in_executor(_RENDER, _metrics.render)
        return 200, _metrics.CONTENT_TYPE, body
    return 404, "text/plain; charset=utf-8", b"not found\n"


class ProbeServer:
    """A probe server running on its own thread and event loop.

    Its own loop keeps it answering while the process's main loop is busy or
    blocked (a store call waiting out an outage), which is when ``/readyz``
    matters most. ``port`` is the bound port; ``close()`` stops it.
    """

    def __init__(self, probe: ReadinessProbe, host: str, port: int) -> None:
        self.probe = probe
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._server = self._loop.run_until_complete(
                    asyncio.start_server(self._handle, host, port)
                )
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                started.set()
                return
            started.set()
            self._loop.run_forever()
            self._server.close()
            # Answers still in flight (a /readyz waiting on the store) end here, on
            # their loop: left pending they would be destroyed with it ("Task was
            # destroyed but it is pending", then "Event loop is closed").
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(self._server.wait_closed())
            self._loop.close()

        self._thread = threading.Thread(target=run, name="nbdurable-probes", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]

    def close(self) -> None:
        """Stop listening and wait for the thread to end."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 10)
            while True:  # headers: read and ignored
                header = await asyncio.wait_for(reader.readline(), 10)
                if header in (b"\r\n", b"\n", b""):
                    break
            parts = line.decode("latin-1").split()
            if len(parts) < 2:
                return
            method, target = parts[0], parts[1].split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                status, kind, body = 405, "text/plain; charset=utf-8", b"method not allowed\n"
            else:
                status, kind, body = await respond(target, self.probe)
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}.get(
                status, "Service Unavailable"
            )
            head = (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + (b"" if method == "HEAD" else body))
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def start_probe_server(
    probe: ReadinessProbe, *, host: str = "127.0.0.1", port: int = 0
) -> ProbeServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` over HTTP/1.1 on a thread of their own."""
    return ProbeServer(probe, host, port)
