"""Run an awaitable from synchronous code: a script, IPython, a notebook cell, a widget callback.

Without a running loop in this thread, awaitables run on one persistent loop per
thread, so tasks an earlier call started (a runtime's scheduler, its runs) go on
in every later call. With a loop running (a Jupyter kernel, a widget callback),
asyncio refuses to run it again, and blocking the thread would starve the
runtime's own tasks on that loop. So the first such call makes that loop
reentrant with ``nest_asyncio2`` (ipykernel depends on it) and runs the loop
nested until the awaitable is done; every task of the loop keeps progressing
meanwhile. Nothing is patched at import: only on the first sync call inside a
running loop, and then that one loop and asyncio's module globals.

``nest_asyncio2.apply`` patches the loop's class. In a kernel that class is
shared by the loops of ipykernel's service threads (IOPub, the shell channel,
the control thread, each subshell), which are running when the first sync call
comes: from then on they would run the nested ``_run_once`` too, and a subshell
JupyterLab opens and deletes would stop and close a patched loop. So the loop
first gets a subclass of its own, and only that subclass is patched.

The first sync call comes from inside asyncio's own ``_run_once``, which counted
its batch of ready callbacks before it ran the one making the call, and pops
that many once the call returns. The nested run may run those callbacks first
(a kernel's first cell often shares its batch with other messages): the queue
is then refilled with cancelled handles, which asyncio skips, so the outer
``_run_once`` never pops an empty queue (an ``IndexError`` out of the kernel's
``run_forever``: the kernel exits).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from ._errors import ConfigurationError

__all__ = ["run_here", "run_sync", "sync_of"]

T = TypeVar("T")
P = ParamSpec("P")

_local = threading.local()
_patch_lock = threading.Lock()


def _thread_loop() -> asyncio.AbstractEventLoop:
    """The persistent loop of this thread, for sync calls made with no loop running."""
    loop: asyncio.AbstractEventLoop | None = getattr(_local, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        _local.loop = loop
    return loop


def _make_reentrant(loop: asyncio.AbstractEventLoop) -> None:
    """Patch ``loop`` (once) so ``run_until_complete`` may run while it is running.

    Raises:
        ConfigurationError: ``nest_asyncio2`` is missing, or the loop is not an
            asyncio ``BaseEventLoop`` (uvloop, for instance) and cannot be nested.
    """
    if getattr(loop, "_nest_patched", False):
        return
    if not isinstance(loop, asyncio.BaseEventLoop):
        raise ConfigurationError(
            f"a sync call inside a running {type(loop).__name__} cannot wait without "
            "blocking it; use `await` instead"
        )
    try:
        import nest_asyncio2  # type: ignore[import-untyped]  # untyped, ships with ipykernel
    except ImportError as exc:
        raise ConfigurationError(
            "a sync call inside a running event loop needs nest-asyncio2 "
            "(pip install nest-asyncio2; ipykernel installs it), or use `await` instead"
        ) from exc
    with _patch_lock:
        if not getattr(loop, "_nest_patched", False):
            base = type(loop)
            loop.__class__ = type(f"Reentrant{base.__name__}", (base,), {"__module__": __name__})
            nest_asyncio2.apply(loop)


def _refill(loop: asyncio.AbstractEventLoop, queued: int) -> None:
    """Give ``loop``'s ready queue back at least the ``queued`` entries a nested run took."""
    ready = loop._ready  # type: ignore[attr-defined]
    for _ in range(queued - len(ready)):
        spent = asyncio.Handle(_nothing, (), loop)
        spent.cancel()
        ready.append(spent)


def _nothing() -> None:
    """The callback of a refilled, cancelled handle (never called)."""


def run_sync(awaitable: Awaitable[T], *, loop: asyncio.AbstractEventLoop | None = None) -> T:
    """Run ``awaitable`` to its end from synchronous code; its result.

    Works with no loop running (a script, IPython without autoawait: one
    persistent loop per thread, so background tasks started by one call go on in
    the next) and inside a running loop (a notebook cell, an ipywidgets or Voilà
    callback: the loop is made reentrant on first use and runs nested, so the
    runtime's tasks on it keep progressing while the caller waits).

    An interrupt (KeyboardInterrupt) while waiting cancels the awaitable and
    propagates; awaiting a run's result or wait only drops that watcher.

    Args:
        awaitable: A coroutine, task or future.
        loop: With no loop running in this thread, the loop to run on instead of
            the thread's own (the one a runtime was opened on); when it runs in
            another thread, the awaitable is handed to it and this thread waits.

    Raises:
        ConfigurationError: A running loop that cannot be nested (see above).
    """
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    queued: int | None = None  # running nested: the ready entries the outer batch may pop
    if running is not None:
        _make_reentrant(running)
        target = running
        queued = len(running._ready)  # type: ignore[attr-defined]
    elif loop is not None and not loop.is_closed():
        if loop.is_running():  # another thread's loop: it does the work, this thread waits
            return asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop).result()
        target = loop
    else:
        target = _thread_loop()
    task = asyncio.ensure_future(awaitable, loop=target)
    try:
        return target.run_until_complete(task)
    except BaseException:
        if not task.done():
            task.cancel()
        raise
    finally:
        if queued is not None:
            _refill(target, queued)


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


def run_here(awaitable: Awaitable[T]) -> T:
    """Run ``awaitable`` to its end on this thread, never handing it to another thread's loop.

    Nested in this thread's running loop as :func:`run_sync` does; with none,
    on a loop of its own, closed before it returns (a thread that waits once
    keeps no loop). For waits that only read a thread-safe store: their
    timeouts hold however busy another thread's loop is.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return run_sync(awaitable)
    loop = asyncio.new_event_loop()
    task = loop.create_task(_awaited(awaitable))
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if not task.done():  # an interrupt: drop the wait, then let it propagate
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        raise
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def sync_of(function: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """A blocking twin of an async function: same arguments, runs through :func:`run_sync`."""

    @functools.wraps(function)
    def blocking(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(function(*args, **kwargs))

    return blocking
