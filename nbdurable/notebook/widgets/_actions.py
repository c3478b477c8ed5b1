"""Button actions of the composed widgets: coroutines run as tasks on the kernel's loop."""

from __future__ import annotations

import asyncio
import html
from collections.abc import Coroutine
from typing import Any

import ipywidgets

__all__ = ["ActionRunner"]


class ActionRunner:
    """Starts a widget's button actions as tasks and reports how they ended.

    Button handlers are synchronous; each action is a coroutine started on the
    running loop (the kernel's). An exception is shown in ``status`` instead of
    being lost in a task nobody awaits.

    Attributes:
        status: The one-line message area the actions report into.
        last: The task of the latest action (await it from a script or a test).
    """

    def __init__(self, status: ipywidgets.HTML) -> None:
        self.status = status
        self.last: asyncio.Task[Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coroutine`` as a task on the running loop."""
        task = asyncio.get_running_loop().create_task(self._report(coroutine))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.last = task
        return task

    def say(self, text: str, *, error: bool = False) -> None:
        """Show one line (escaped) in the status area."""
        # the theme's error colour: legible in JupyterLab's light and dark themes
        color = "var(--jp-error-color1, #d32f2f)" if error else "inherit"
        self.status.value = f'<span style="color:{color}">{html.escape(text)}</span>'

    async def _report(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        try:
            return await coroutine
        except Exception as exc:
            self.say(f"{type(exc).__name__}: {exc}", error=True)
            return None
