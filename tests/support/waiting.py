"""Waiting for a condition in async tests (shared by the runtime and notebook tests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually(
    check: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0, interval: float = 0.01
) -> None:
    """Wait (letting the loop run) until ``check()`` is true, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)
