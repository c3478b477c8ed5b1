"""Verdicts this process is recording, per run: a blocking wait lets them land first.

A card click reaches the kernel before the next cell runs, but its verdict is
recorded by a task that makes store calls off the loop. A blocking wait that
starts meanwhile would read the run still waiting for a human and give up;
it waits for the verdicts in flight on its run instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

__all__ = ["landed", "verdict_in_flight"]

_TASKS: dict[str, set[asyncio.Task[object]]] = {}


@contextlib.contextmanager
def verdict_in_flight(run_id: str) -> Iterator[None]:
    """Mark the current task as recording a verdict on ``run_id`` while the block runs."""
    task = asyncio.current_task()
    if task is None:
        yield
        return
    tasks = _TASKS.setdefault(run_id, set())
    tasks.add(task)
    try:
        yield
    finally:
        tasks.discard(task)
        if not tasks:
            _TASKS.pop(run_id, None)


async def landed(run_id: str) -> bool:
    """Wait for the verdicts in flight on ``run_id`` (other tasks'); whether there were any.

    Only this loop's: a blocking wait from another thread runs on a loop of its
    own, and a task of the runtime's loop (busy, perhaps joining that very
    thread) cannot be awaited there; such a wait sees the verdict once it is
    recorded, as it would one given a moment later.
    """
    current = asyncio.current_task()
    loop = asyncio.get_running_loop()
    waiting = [
        t
        for t in list(_TASKS.get(run_id, ()))
        if t is not current and not t.done() and t.get_loop() is loop
    ]
    if not waiting:
        return False
    await asyncio.gather(*waiting, return_exceptions=True)
    return True
