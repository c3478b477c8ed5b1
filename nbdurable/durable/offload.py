"""Store calls made from async code run off the event loop.

The bundled stores are synchronous (SQLite, PostgreSQL through psycopg's
pool, JSONL files, memory) and thread-safe. A call made directly from a
coroutine would hold the event loop for its whole round trip: in a notebook
that freezes the kernel, in a worker it delays every lease renewal. Async code
therefore sends each store call through :func:`offload`, which runs a sync
call on a small pool of threads kept for store calls (an async callable is
simply awaited).

A thread round trip costs a few hundred microseconds (two thread wake-ups),
more than a local SQLite commit. A store whose writes are local and can be
made never to wait declares ``local_nonblocking_writes`` and a method
``try_without_waiting(fn, *args, **kwargs)``: :func:`offload` hands it a call of
one of its own methods first, on the loop's thread, and the store either runs
the call in a mode that cannot wait (its lock taken without blocking, SQLite's
busy timeout at zero, no fsync, no checkpoint) or returns :data:`WOULD_WAIT`
having changed nothing; the call then goes to a store thread as usual.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

__all__ = ["STORE_THREADS", "WOULD_WAIT", "in_background", "offload"]

T = TypeVar("T")

STORE_THREADS = 16
"""Store calls that may run at once from one process's async code (more wait their turn)."""


class _WouldWait:
    __slots__ = ()

    def __repr__(self) -> str:
        return "WOULD_WAIT"


WOULD_WAIT: Any = _WouldWait()
"""What ``try_without_waiting`` returns for a call it did not make (it would have waited)."""

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _store_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="nbdurable-store")
        return _executor


def in_background(fn: Callable[[], object]) -> None:
    """Run ``fn()`` on a store thread and return at once (its result and errors are dropped).

    For upkeep a store defers from a call made on the loop's thread (a WAL
    checkpoint): an idle store thread takes it, without the wait for a new
    thread to start that ``threading.Thread.start`` makes.
    """
    _store_executor().submit(fn)


async def offload(fn: Callable[..., T | Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` without blocking the running event loop.

    A sync ``fn`` runs on a store thread, in a copy of the caller's context
    (context variables such as the store retry's deadline and the current
    trace come along); an async one is awaited here. A method of a store that
    declares ``local_nonblocking_writes`` is first offered to the store's
    ``try_without_waiting``, which runs it here when it can do so without
    waiting for anything (see the module's docstring). A call that has started
    runs to its end even when the caller is cancelled meanwhile, as a
    synchronous call would have: the cancellation is raised once it returned,
    so a caller's cleanup (and a store's ``close()``) never races its own write.

    Raises:
        Exception: Whatever ``fn`` raised.
        asyncio.CancelledError: The caller was cancelled during the call.
    """
    owner = getattr(fn, "__self__", None)
    if owner is not None and getattr(owner, "local_nonblocking_writes", False):
        done = owner.try_without_waiting(fn, *args, **kwargs)
        if done is not WOULD_WAIT:
            return cast(T, done)
    if inspect.iscoroutinefunction(fn):
        return cast(T, await fn(*args, **kwargs))
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    future = loop.run_in_executor(_store_executor(), call)
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait((future,))
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not future.cancelled():
            future.exception()  # retrieved: the caller is gone, its cancellation wins
        raise asyncio.CancelledError
    value = future.result()
    if inspect.isawaitable(value):
        return cast(T, await value)
    return value
