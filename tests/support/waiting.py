"""Waiting for a condition in tests (shared by the runtime, notebook and CLI tests)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nbdurable import read_events


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    timeout: float = 10.0,
    interval: float = 0.01,
    explain: Callable[[], str] | None = None,
) -> None:
    """Wait (letting the loop run) until ``check()`` is true, or fail after ``timeout`` seconds.

    ``explain``: what the failure message adds (the state a rare timeout needs to be
    understood from a CI log alone).
    """
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            said = f"; {explain()}" if explain is not None else ""
            raise AssertionError(f"condition not met within {timeout}s{said}")
        await asyncio.sleep(interval)


def busy_store_threads() -> str:
    """The store threads not waiting for work, each with its innermost frames."""
    frames = sys._current_frames()
    busy = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if frame is None or not thread.name.startswith("nbdurable-store"):
            continue
        stack = traceback.extract_stack(frame)
        if stack[-1].name == "_worker" and stack[-1].filename.endswith("futures/thread.py"):
            continue  # idle: waiting on the pool's queue
        busy.append(
            f"{thread.name} at "
            + " <- ".join(f"{Path(f.filename).name}:{f.lineno}:{f.name}" for f in stack[:-7:-1])
        )
    return f"busy store threads: {busy}"


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


async def result_within(run: Any, timeout: float) -> Any:
    """``run.result()`` within ``timeout`` s; else an AssertionError saying where the run stood.

    For rare CI timeouts: the run's record state, its last events and the busy
    store threads, read when the wait ran out.
    """
    try:
        return await asyncio.wait_for(run.result(), timeout)
    except TimeoutError:
        record = run.record()
        events = await read_events(run.runtime.event_store, run.run_id)
        said = [f"{e.offset}:{e.type}" for e in events[-8:]]
        raise AssertionError(
            f"run {run.run_id} not done within {timeout}s: record state={record.state!r} "
            f"owner={record.lease_owner!r} lease_expires_at={record.lease_expires_at!r}; last events {said}; "
            + busy_store_threads()
        ) from None
