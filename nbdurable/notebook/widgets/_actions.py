"""Widget actions (buttons, the views' messages): coroutines run as tasks on the kernel's loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["ActionRunner"]


class ActionRunner:
    """Starts a widget's actions as tasks and reports how they failed.

    Button and message handlers are synchronous; each action is a coroutine
    started on the running loop (the kernel's). An exception is said with
    ``report`` (in the widget) instead of being lost in a task nobody awaits.

    Attributes:
        report: Says an action's error (one line) where the widget shows messages.
        last: The task of the latest action (await it from a script or a test).
    """

    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report
        self.last: asyncio.Task[Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coroutine`` as a task on the running loop."""
        task = asyncio.get_running_loop().create_task(self._report(coroutine))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.last = task
        return task

    async def settled(self) -> None:
        """Wait until every action started is done."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _report(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        try:
            return await coroutine
        except Exception as exc:
            self.report(f"{type(exc).__name__}: {exc}")
            return None
