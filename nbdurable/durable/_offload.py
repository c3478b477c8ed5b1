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
made never to wait subclasses :class:`NowaitCapable` (``local_nonblocking_writes``,
``try_without_waiting(fn, *args, **kwargs)``): :func:`offload` hands it a call of
one of its own methods first, on the loop's thread, and the store either runs
the call in a mode that cannot wait (its lock taken without blocking, SQLite's
busy timeout at zero, no fsync, no checkpoint) or returns :data:`WOULD_WAIT`
having changed nothing; the call then goes to a store thread as usual.

Objects that stand in front of such a store (the runtime's retrying and
mirroring views of it, a run owner's pending writes) make their own calls
there too: they mix in :class:`NowaitDelegate` and name the methods that only
call the store (and keep in-memory books) and may be run again from the start.
Such a method runs on the loop's thread inside the store's
``run_without_waiting`` scope; a store call in it that would wait raises
:class:`WouldWait`, which no ``except Exception`` (a retry loop) catches, the
store rolls back what that call began, and the whole method goes to a store
thread instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, ParamSpec, TypeVar, cast

__all__ = [
    "STORE_THREADS",
    "WOULD_WAIT",
    "NowaitCapable",
    "NowaitDelegate",
    "WouldWait",
    "in_background",
    "offload",
    "run_without_waiting",
]

T = TypeVar("T")
P = ParamSpec("P")

STORE_THREADS = 16
"""Store calls that may run at once from one process's async code (more wait their turn)."""


class _WouldWait:
    __slots__ = ()

    def __repr__(self) -> str:
        return "WOULD_WAIT"


WOULD_WAIT: Any = _WouldWait()
"""What ``try_without_waiting`` returns for a call it did not make (it would have waited)."""


class WouldWait(BaseException):
    """A store call inside ``run_without_waiting`` would have had to wait.

    A ``BaseException``: retry loops (``except Exception``) let it through, so
    nothing sleeps on the loop's thread; the store's scope turns it into
    :data:`WOULD_WAIT`.
    """


def run_without_waiting(store: object, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` here, inside ``store``'s scope that never waits; else ``WOULD_WAIT``.

    ``store`` is a store with ``run_without_waiting`` (the SQLite store) or an
    object standing in front of one (a :class:`NowaitDelegate`); anything else
    gives :data:`WOULD_WAIT` at once. ``fn`` must make only that store's calls
    and be safe to run again from the start: after ``WOULD_WAIT`` the caller
    runs it on a store thread, and calls it made before the one that would
    have waited may have committed.
    """
    if not (isinstance(store, NowaitCapable) and store.local_nonblocking_writes):
        return WOULD_WAIT  # type: ignore[no-any-return]
    return store.run_without_waiting(fn, *args, **kwargs)


class NowaitCapable:
    """An object whose calls :func:`offload` may run on the event loop's thread.

    The defaults say no: a subclass that can run calls without waiting
    overrides all three.
    """

    @property
    def local_nonblocking_writes(self) -> bool:
        """Whether calls may run on the loop's thread. Default: False."""
        return False

    def try_without_waiting(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` here when it need not wait; else (the default) ``WOULD_WAIT``."""
        return WOULD_WAIT  # type: ignore[no-any-return]

    def run_without_waiting(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn`` here, none of its store calls able to wait; else (the default) ``WOULD_WAIT``."""
        return WOULD_WAIT  # type: ignore[no-any-return]


class NowaitDelegate(NowaitCapable):
    """Mixin for an object standing in front of a store: its listed methods may run here.

    :func:`offload` offers each call of one of the methods named in
    ``nowait_methods`` (as the class listing them defines it: not a
    subclass's override) to the
    store behind it (:meth:`nowait_store`) through :func:`run_without_waiting`.
    List only methods that call nothing but that store and may be run again
    from the start (see :func:`run_without_waiting`).
    """

    nowait_methods: ClassVar[frozenset[str]] = frozenset()

    def nowait_store(self) -> object:
        """The store whose calls this object's methods make."""
        raise NotImplementedError

    @property
    def local_nonblocking_writes(self) -> bool:
        """Whether the store behind can run calls on the loop's thread."""
        store = self.nowait_store()
        return isinstance(store, NowaitCapable) and store.local_nonblocking_writes

    def try_without_waiting(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """A listed method of this object, run here when it need not wait; else ``WOULD_WAIT``."""
        func = getattr(fn, "__func__", None)
        name = getattr(func, "__name__", "")
        # The class that lists the methods vouches for its own definitions only:
        # a subclass's override (what it calls is unknown) runs on a store thread.
        lister = next(c for c in type(self).__mro__ if "nowait_methods" in vars(c))
        if (
            getattr(fn, "__self__", None) is not self
            or name not in self.nowait_methods
            or vars(lister).get(name) is not func
        ):
            return WOULD_WAIT  # type: ignore[no-any-return]
        return run_without_waiting(self.nowait_store(), fn, *args, **kwargs)

    def run_without_waiting(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Pass a call on to the store behind (an object in front of this one uses it)."""
        return run_without_waiting(self.nowait_store(), fn, *args, **kwargs)


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()
_on_threads: dict[int, tuple[concurrent.futures.Future[Any], float]] = {}
"""By store (its id): the latest call of a nowait-capable store sent to a store thread, and when."""

_YIELD_FOR = 0.002
"""How long the loop's thread hands the GIL to a store thread's call that holds the lock (s)."""
_YIELD_AFTER = 0.05
"""A store thread's call sent longer ago (s) is not yielded to: it waits for something else."""


def _behind(owner: NowaitCapable) -> object:
    """The store whose lock a nowait call of ``owner`` takes."""
    return owner.nowait_store() if isinstance(owner, NowaitDelegate) else owner


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


def _yielded_to(ahead: concurrent.futures.Future[Any], sent: float) -> bool:
    """Let a store thread's call just sent finish first, briefly: whether it has ended.

    That call holds the store's lock while it waits for the GIL, which the
    loop's thread holds: after each SQLite statement it gets it back only when
    the loop's thread gives it up (every few milliseconds). Meanwhile every
    write of the loop found the lock taken and went to a store thread too,
    each holding the lock in turn: under 200 runs most writes went to threads
    (issue 42). Sleeping for zero seconds hands the GIL over at once; this
    does so for at most :data:`_YIELD_FOR`, and not for a call sent more than
    :data:`_YIELD_AFTER` ago (it waits for something else: another process's
    lock, a disk).
    """
    now = time.perf_counter()
    if now - sent > _YIELD_AFTER:
        return False
    deadline = now + _YIELD_FOR
    while not ahead.done() and time.perf_counter() < deadline:
        time.sleep(0)
    return ahead.done()


async def offload(fn: Callable[P, T | Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` without blocking the running event loop.

    A sync ``fn`` runs on a store thread, in a copy of the caller's context
    (context variables such as the store retry's deadline and the current
    trace come along); an async one is awaited here. A method of a store that
    is a :class:`NowaitCapable` with ``local_nonblocking_writes`` is first offered to its
    ``try_without_waiting``, which runs it here when it can do so without
    waiting for anything (see the module's docstring). A call that has started
    runs to its end even when the caller is cancelled meanwhile, as a
    synchronous call would have: the cancellation is raised once it returned,
    so a caller's cleanup (and a store's ``close()``) never races its own write.

    Raises:
        Exception: Whatever ``fn`` raised.
        asyncio.CancelledError: The caller was cancelled during the call.
    """
    owner = getattr(fn, "__self__", None)  # the object of a bound method
    key: int | None = None
    if isinstance(owner, NowaitCapable) and owner.local_nonblocking_writes:
        done = owner.try_without_waiting(fn, *args, **kwargs)
        if done is not WOULD_WAIT:
            return cast(T, done)
        key = id(_behind(owner))
        ahead, sent = _on_threads.get(key, (None, 0.0))
        if ahead is not None and not ahead.done() and _yielded_to(ahead, sent):
            done = owner.try_without_waiting(fn, *args, **kwargs)
            if done is not WOULD_WAIT:
                return cast(T, done)
        if ahead is not None and not ahead.done():
            # Most likely the store's lock is held by a call of ours on a store
            # thread: this one would wait behind it there too. Waiting here for
            # it to end and trying again spares the trip to a thread, and the
            # convoy such trips make (each holds the lock that makes the next
            # call go to a thread too: issue 42, two trips a step under load).
            await asyncio.wait((asyncio.wrap_future(ahead),))
            done = owner.try_without_waiting(fn, *args, **kwargs)
            if done is not WOULD_WAIT:
                return cast(T, done)
    if inspect.iscoroutinefunction(fn):
        return cast(T, await fn(*args, **kwargs))
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    call = functools.partial(context.run, fn, *args, **kwargs)
    submitted = _store_executor().submit(call)
    if key is not None:
        _on_threads[key] = (submitted, time.perf_counter())
    future = asyncio.wrap_future(submitted, loop=loop)
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
