"""A coroutine that measures how late the event loop wakes it (a blocked loop shows)."""

from __future__ import annotations

import asyncio


class Ticker:
    """A coroutine that wakes every 10 ms and keeps the worst lateness it saw."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.01)
            self.worst = max(self.worst, loop.time() - before - 0.01)
            self.ticks += 1

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
