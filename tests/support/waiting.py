"""Waiting for a condition in tests (shared by the runtime, notebook and CLI tests)."""

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


def wait_until(check: Callable[[], object], timeout: float) -> None:
    """Block until ``check()`` is true (an error counts as not yet), or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s")
