"""StoreRetry.give_up_within: a shutdown with a deadline of its own cuts store retries short,
including a call already retrying and one already waiting for a PostgreSQL connection."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.durable._transient import StoreRetry, StoreUnavailableError, retry_deadline


def _sqlite_busy(tmp_path: Path) -> sqlite3.OperationalError:
    """A real SQLITE_BUSY: another connection holds the write lock."""
    path = tmp_path / "busy.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        other.close()
        holder.execute("ROLLBACK")
        holder.close()
    raise AssertionError("no SQLITE_BUSY")


class Outcome:
    """What a call made on another thread returned or raised, and when it ended."""

    def __init__(self, fn: Any) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.ended: float | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Any) -> None:
        try:
            self.result = fn()
        except BaseException as exc:
            self.error = exc
        self.ended = time.monotonic()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the call still runs after {timeout} s"


def test_a_call_retrying_gives_up_at_the_cutoff_not_after_the_budget(tmp_path: Path) -> None:
    busy = _sqlite_busy(tmp_path)
    retry = StoreRetry(60_000, first_delay=0.01, max_delay=0.05)
    tries: list[float] = []

    def flaky() -> None:
        tries.append(time.monotonic())
        raise busy

    call = Outcome(lambda: retry.call("release a lease", flaky))
    time.sleep(0.3)
    cut = time.monotonic()
    retry.give_up_within(0.2)
    call.join(10)
    assert isinstance(call.error, StoreUnavailableError) and call.error.__cause__ is busy
    assert call.ended is not None and cut + 0.2 <= call.ended < cut + 2.0
    # past the cutoff every call is tried once, and gives up at its first transient failure
    count = len(tries)
    with pytest.raises(StoreUnavailableError):
        retry.call("renew a lease", flaky)
    assert len(tries) == count + 1


def test_a_cutoff_is_a_deadline_outside_an_outage_too_and_an_earlier_one_stays() -> None:
    retry = StoreRetry(60_000)
    seen: list[float | None] = []
    retry.call("read", lambda: seen.append(retry_deadline()))
    assert seen == [None]  # no outage, no cutoff: a call waits as long as the store lets it
    retry.give_up_within(5.0)
    retry.give_up_within(30.0)  # later than the first: ignored
    before = time.monotonic()
    retry.call("read", lambda: seen.append(retry_deadline()))
    assert seen[1] is not None and before + 4.0 < seen[1] <= before + 5.0
    assert retry.call("read", lambda: "still answered") == "still answered"
    with pytest.raises(ValueError):
        retry.give_up_within(-1.0)


def test_a_call_waiting_for_a_pooled_connection_stops_waiting_at_a_cutoff_set_meanwhile(
    pg_database: str,
) -> None:
    """The pool's only connection is taken; a call waits for it (30-s pool timeout, no outage
    yet, so no deadline when it began). A cutoff set while it waits ends the wait within
    about a second, and the call gives up (StoreUnavailableError), long before 30 s."""
    store = nd.PostgresSessionStore(pg_database, max_size=1, timeout=30.0)
    retry = StoreRetry(60_000)
    try:
        with store.pool.connection():
            call = Outcome(lambda: retry.call("list runs", store.rt_list))
            time.sleep(0.5)
            assert call.ended is None  # waiting for the connection
            cut = time.monotonic()
            retry.give_up_within(0.2)
            call.join(10)
        assert isinstance(call.error, StoreUnavailableError), call.error
        assert type(call.error.__cause__).__name__ == "PoolTimeout"
        assert call.ended is not None and call.ended - cut < 3.0
        assert store.rt_list() == []  # the connection is back: the store answers
    finally:
        store.close()
