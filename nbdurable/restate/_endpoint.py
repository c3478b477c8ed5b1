"""Serve a Restate SDK endpoint (an ASGI app) with Hypercorn on a 127.0.0.1 port or any bind."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncIterator
from typing import Any

__all__ = ["serving"]


@contextlib.asynccontextmanager
async def serving(app: Any, bind: str) -> AsyncIterator[None]:
    """Serve ``app`` on ``bind`` (``host:port``, HTTP/1.1 and h2c) while the block runs."""
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [bind]
    config.loglevel = "ERROR"
    config.graceful_timeout = 0.5
    # the SDK's app has no lifespan: Hypercorn's warning about it says nothing
    logging.getLogger("hypercorn.error").setLevel(logging.ERROR)
    stop = asyncio.Event()
    started = asyncio.Event()

    async def shutdown() -> None:
        started.set()
        await stop.wait()

    task = asyncio.get_running_loop().create_task(serve(app, config, shutdown_trigger=shutdown))
    await started.wait()
    await asyncio.sleep(0)  # the socket is bound before the trigger is awaited
    try:
        yield
    finally:
        # Legs still in flight are left as a crash leaves them (Restate invokes
        # them again): no graceful wait for their requests.
        # Hypercorn and the SDK log the connections cut here as errors: they are not.
        for name in ("restate.server", "hypercorn.error", "asyncio", "py.warnings"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        stop.set()
        await asyncio.wait({task}, timeout=0.5)
        task.cancel()
        await asyncio.wait({task}, timeout=1)
        if threading.current_thread() is threading.main_thread():
            # The SDK's app took SIGTERM on this loop at its first request. A loop
            # that still holds a signal handler when it is collected (from any
            # thread but the main one) raises in its finalizer: give it back.
            asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
