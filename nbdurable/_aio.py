"""Waiting inside the package's long-lived asyncio loops."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

__all__ = ["wait_event"]


async def wait_event(
    event: asyncio.Event,
    timeout: float,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds have passed; whether it is set.

    A cancellation of the waiting task always propagates. ``asyncio.wait_for``
    on Python 3.11 returns the event's result instead when the cancellation
    arrives in the loop iteration in which the event is set, and a loop around
    it then never ends: ``asyncio.run``, which cancels every task left once at
    its end, waits for it for ever. ``asyncio.timeout`` counts cancellations,
    so it tells its own from the caller's.

    ``sleep`` measures the timeout on another clock (``Deps.sleep``, a test's
    controllable one): the event and that sleep race, and whichever ends first
    ends the wait (``asyncio.wait`` never swallows the caller's cancellation).
    """
    if event.is_set():
        return True
    if sleep is not asyncio.sleep:
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(sleep(timeout))]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        return event.is_set()
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()
