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
from typing import Any

from . import metrics as _metrics
from .durable.runtime_store import RuntimeStore

__all__ = [
    "Check",
    "ProbeServer",
    "ReadinessProbe",
    "start_probe_server",
    "store_check",
    "temporal_check",
]

Check = Callable[[], Awaitable[None]]
"""A readiness check: returns when its dependency answers, raises when not."""

CHECK_TIMEOUT_S = 3.0


def store_check(store: RuntimeStore) -> Check:
    """A check that the store answers (one read of a run record, in a thread)."""
    busy: list[asyncio.Future[Any]] = []

    async def check() -> None:
        # One probe at a time: a store that hangs must not collect a thread per probe.
        if busy and not busy[0].done():
            raise TimeoutError("the previous store probe has not returned")
        busy.clear()
        future = asyncio.ensure_future(asyncio.to_thread(store.rt_get, "nbdurable-readyz"))
        # Its outcome is read here or by nobody (a probe that timed out, the last
        # one): retrieved, so asyncio does not log "exception was never retrieved".
        future.add_done_callback(lambda done: done.cancelled() or done.exception())
        busy.append(future)
        await asyncio.wait_for(asyncio.shield(future), CHECK_TIMEOUT_S)

    return check


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
    if path == "/healthz":
        return 200, "text/plain; charset=utf-8", b"ok\n"
    if path == "/readyz":
        failed = await probe.failures()
        if failed:
            body = "not ready: " + "; ".join(failed) + "\n"
            return 503, "text/plain; charset=utf-8", body.encode()
        return 200, "text/plain; charset=utf-8", b"ok\n"
    if path == "/metrics":
        return 200, _metrics.CONTENT_TYPE, _metrics.render()
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
