"""Transient store failures: which errors a retry may cure, and the bounded retry itself.

A store call can fail for reasons that have nothing to do with the run that made
it: the PostgreSQL server restarts (every connection is cut, ``AdminShutdown``),
the network drops, two transactions deadlock, another process holds SQLite's
write lock longer than its busy timeout. Such a failure is *transient*: the same
call, sent again a little later, succeeds. :func:`is_transient` is the one place
that says which errors are; :class:`StoreRetry` sends a call again, with
exponential backoff, until it succeeds or the store has been failing for a
bounded time, and then raises :class:`StoreUnavailableError`.

The drivers (psycopg, sqlite3) are never imported here: errors are recognised by
their class names and codes, so this module costs nothing for a store that does
not use them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from .._deps import Logger
from .._errors import NbdurableError, StoreUnavailableError
from ._offload import offload

__all__ = [
    "DEFAULT_STORE_RETRY_MS",
    "StoreRetry",
    "StoreUnavailableError",
    "bounded_wait",
    "is_transient",
    "retry_deadline",
]

T = TypeVar("T")

STORE_ERROR_HOOK: Callable[[str], None] | None = None
"""Called with the operation at each transient store failure (set by ``nbdurable.metrics``)."""

DEFAULT_STORE_RETRY_MS = 60_000
"""How long a store may keep failing transiently before callers give up (ms)."""

# SQLSTATEs a retry cures: the connection was lost or refused (class 08), the
# server is shutting down or starting (57P01 admin_shutdown, 57P02
# crash_shutdown, 57P03 cannot_connect_now), too many connections (53300), and
# transactions rolled back by the server's concurrency control (40001
# serialization_failure, 40P01 deadlock_detected).
# 25P03: the server ended a session idle in its transaction too long (the
# transaction rolled back; a process paused mid-transaction wakes to it).
_PG_TRANSIENT = frozenset({"57P01", "57P02", "57P03", "53300", "40001", "40P01", "25P03"})
_PG_CONNECTION_CLASS = "08"
# Client-side errors that are not the server's: the pool was closed on purpose; a
# pipeline aborted by an earlier statement's error (that error is the one to judge).
_PG_PERMANENT_NAMES = frozenset({"PoolClosed", "PipelineAborted"})
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_LOCKED_MESSAGES = ("database is locked", "database table is locked")
# The retry whose call is in progress: its deadline is read when asked, so a wait
# inside the call sees an outage that began, or a cutoff set, after it started.
_RETRY: ContextVar[StoreRetry | None] = ContextVar("nbdurable_store_retry", default=None)
# When the calls of a bounded wait (a probe, a metrics sample) stop waiting inside the store.
_WAIT_UNTIL: ContextVar[float | None] = ContextVar("nbdurable_store_wait_until", default=None)


@contextlib.contextmanager
def bounded_wait(seconds: float) -> Iterator[None]:
    """Store calls made inside wait for the store at most ``seconds`` from now.

    For calls that must answer soon whatever the store does (a readiness
    probe, a metrics sample): a store that waits inside a call (PostgreSQL's
    pool, for a connection, 30 s by default) gives up by then, so the call
    fails instead of holding its thread through an outage.
    """
    token = _WAIT_UNTIL.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _WAIT_UNTIL.reset(token)


def retry_deadline() -> float | None:
    """When the retry of the store call in progress gives up (``time.monotonic()``), or None.

    Set while a retry is under way (the store has been failing), or once a
    shutdown cut retries short (:meth:`StoreRetry.give_up_within`), or inside
    :func:`bounded_wait` (the earliest of these); read anew at each call. A
    store that waits inside a call (PostgreSQL's pool, for a connection) waits
    no longer than this, so one attempt cannot outlast the whole budget.
    """
    retry = _RETRY.get()
    deadline = None if retry is None else retry._deadline()
    until = _WAIT_UNTIL.get()
    if until is not None and (deadline is None or until < deadline):
        return until
    return deadline


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a store failure that the same call may not meet again.

    True for PostgreSQL connection loss or refusal, server shutdown and start-up
    (``AdminShutdown``, ``CannotConnectNow``), a session ended for idling in
    its transaction (``IdleInTransactionSessionTimeout``), a pool timeout, serialization
    failures and deadlocks, and SQLite's busy and locked errors. False for
    everything else: nbdurable's own errors (a fenced-out write, a conflict) are
    decisions, not accidents, and a corrupt file or a constraint violation does
    not heal by waiting. An error raised from another one (``raise ... from``)
    counts as transient when its cause is.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, NbdurableError):
            return False
        if _transient(current):
            return True
        seen.add(id(current))
        current = current.__cause__
    return False


def _transient(exc: BaseException) -> bool:
    kind = type(exc)
    if kind.__module__.startswith("psycopg"):
        if kind.__name__ in _PG_PERMANENT_NAMES:
            return False
        state = getattr(exc, "sqlstate", None)
        if state:
            return bool(state.startswith(_PG_CONNECTION_CLASS) or state in _PG_TRANSIENT)
        # No SQLSTATE: the client lost or could not open the connection
        # ("server closed the connection unexpectedly", "the connection is
        # closed", a pool that got no connection in time).
        return any(
            base.__name__ == "OperationalError" and base.__module__.startswith("psycopg")
            for base in kind.__mro__
        )
    if kind.__module__ == "sqlite3" and kind.__name__ == "OperationalError":
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
        return str(exc).startswith(_SQLITE_LOCKED_MESSAGES)
    return False


class StoreRetry:
    """Sends a store call again while it fails transiently, for a bounded time.

    The budget counts from the first failure of an outage, across every call
    made through this object: when one call has been retrying for 50 s of a
    60 s budget, another call that fails then gets the remaining 10 s, not 60 s
    of its own. Any success ends the outage. Once the budget is spent each call
    is still tried once (the store may be back), and fails with
    :class:`StoreUnavailableError` at its first transient error. Backoff doubles
    from ``first_delay`` to ``max_delay`` seconds.

    Args:
        budget_ms: How long the store may keep failing; 0 gives up at the first
            transient error.
        logger: Told when an outage starts and ends.
        first_delay: The first wait, in seconds.
        max_delay: The longest wait, in seconds.
        on_failure: Called after each transient failure, before the wait (a
            store's hook that drops connections a server restart broke).

    Raises:
        ValueError: A negative budget or delay.
    """

    def __init__(
        self,
        budget_ms: int = DEFAULT_STORE_RETRY_MS,
        *,
        logger: Logger | None = None,
        first_delay: float = 0.05,
        max_delay: float = 2.0,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        if isinstance(budget_ms, bool) or not isinstance(budget_ms, int) or budget_ms < 0:
            raise ValueError(f"store_retry_ms must be an integer >= 0, not {budget_ms!r}")
        if first_delay < 0 or max_delay < first_delay:
            raise ValueError("delays must satisfy 0 <= first_delay <= max_delay")
        self.budget_ms = budget_ms
        self.logger = logger
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.on_failure = on_failure
        self._lock = threading.Lock()
        self._failing_since: float | None = None
        self._failures = 0
        self._cutoff: float | None = None  # time.monotonic() when every retry gives up

    @classmethod
    def for_store(
        cls, store: object, budget_ms: int = DEFAULT_STORE_RETRY_MS, logger: Logger | None = None
    ) -> StoreRetry:
        """A retry of ``store``'s calls, with a history store's ``recover_connections`` hook."""
        from .store import HistoryStore  # deferred: the seam's run store imports this module

        recover = store.recover_connections if isinstance(store, HistoryStore) else None
        return cls(budget_ms, logger=logger, on_failure=recover)

    @property
    def failing(self) -> bool:
        """Whether the store is failing now (an outage has started and not ended)."""
        return self._failing_since is not None

    def give_up_within(self, seconds: float) -> None:
        """Stop retrying ``seconds`` from now, whatever is left of the budget.

        For a shutdown with a deadline of its own (a worker has its grace
        period): a call failing transiently after that, or already waiting
        between tries then, raises :class:`StoreUnavailableError` at its next
        failure, and a call waiting inside the store (PostgreSQL's pool, for a
        connection) waits no longer than that, outage or not. An earlier
        cutoff stays.

        Raises:
            ValueError: A negative ``seconds``.
        """
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, not {seconds!r}")
        cutoff = time.monotonic() + seconds
        with self._lock:
            if self._cutoff is None or cutoff < self._cutoff:
                self._cutoff = cutoff

    def call(self, operation: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, retried while it fails transiently (sleeps between tries).

        Raises:
            StoreUnavailableError: The store kept failing past the budget.
            Exception: Whatever ``fn`` raised that is not transient.
        """
        delay = self.first_delay
        while True:
            token = _RETRY.set(self)
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                wait = self._failed(operation, exc, delay)
                time.sleep(wait)
                delay = min(delay * 2, self.max_delay)
                continue
            finally:
                _RETRY.reset(token)
            self._succeeded(operation)
            return result

    async def acall(
        self, operation: str, fn: Callable[..., T | Awaitable[T]], *args: Any, **kwargs: Any
    ) -> T:
        """Like :meth:`call`, for a sync or async ``fn``; never blocks the loop.

        A sync ``fn`` runs on a store thread (:func:`~nbdurable.durable._offload.offload`).
        """
        delay = self.first_delay
        while True:
            token = _RETRY.set(self)
            try:
                result: T = await offload(fn, *args, **kwargs)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                wait = self._failed(operation, exc, delay)
                await asyncio.sleep(wait)
                delay = min(delay * 2, self.max_delay)
                continue
            finally:
                _RETRY.reset(token)
            self._succeeded(operation)
            return result

    def _deadline(self) -> float | None:
        # Only during an outage: outside one, a call may wait as long as the
        # store lets it (a pool that is merely busy is no outage), unless a
        # shutdown set a cutoff.
        started, cutoff = self._failing_since, self._cutoff
        deadline = None if started is None else started + self.budget_ms / 1000
        if cutoff is not None and (deadline is None or cutoff < deadline):
            return cutoff
        return deadline

    def _failed(self, operation: str, exc: Exception, delay: float) -> float:
        """How long to wait before the next try of a transient failure; raises when none is left."""
        now = time.monotonic()
        with self._lock:
            started = self._failing_since
            first = started is None
            if started is None:
                started = self._failing_since = now
            self._failures += 1
        if STORE_ERROR_HOOK is not None:
            STORE_ERROR_HOOK(operation)
        if first and self.logger is not None:
            self.logger.warning(
                "nbdurable: the store failed (%s: %r); retrying for up to %.1f s",
                operation,
                exc,
                self.budget_ms / 1000,
            )
        if self.on_failure is not None:
            with contextlib.suppress(Exception):  # a hook must not turn a retry into a failure
                self.on_failure(exc)
        remaining = self.budget_ms / 1000 - (now - started)
        if self._cutoff is not None:
            remaining = min(remaining, self._cutoff - now)
        if remaining <= 0:
            raise StoreUnavailableError(operation, int((now - started) * 1000), exc) from exc
        return min(delay, remaining)

    def _succeeded(self, operation: str) -> None:
        if self._failing_since is None:
            return
        with self._lock:
            started, self._failing_since = self._failing_since, None
            failures, self._failures = self._failures, 0
        if started is not None and self.logger is not None:
            self.logger.warning(
                "nbdurable: the store is back (%s) after %.1f s and %d failed tries",
                operation,
                time.monotonic() - started,
                failures,
            )
