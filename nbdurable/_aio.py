"""Waiting inside the package's long-lived asyncio loops."""

from __future__ import annotations

import asyncio

__all__ = ["wait_event"]


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds have passed; whether it is set.

    A cancellation of the waiting task always propagates. ``asyncio.wait_for``
    on Python 3.11 returns the event's result instead when the cancellation
    arrives in the loop iteration in which the event is set, and a loop around
    it then never ends: ``asyncio.run``, which cancels every task left once at
    its end, waits for it for ever. ``asyncio.timeout`` counts cancellations,
    so it tells its own from the caller's.
    """
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()
