"""Which store errors are transient (real errors from real servers and files), and StoreRetry."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from nbdurable import FencedOutError, StoreCorruptionError
from nbdurable.durable._transient import (
    StoreRetry,
    StoreUnavailableError,
    is_transient,
    retry_deadline,
)


def _raised(fn: Any) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def _sqlite_busy(tmp_path: Path) -> sqlite3.OperationalError:
    """A real SQLITE_BUSY: another connection holds the write lock."""
    path = tmp_path / "busy.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        exc = _raised(lambda: other.execute("BEGIN IMMEDIATE"))
    finally:
        other.close()
        holder.execute("ROLLBACK")
        holder.close()
    assert isinstance(exc, sqlite3.OperationalError)
    return exc


# -- classification -------------------------------------------------------------------


def _psycopg() -> tuple[Any, Any]:
    """psycopg and its errors module (the postgres extra: imported by its tests only, so
    that the SQLite tests here run without it)."""
    psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from psycopg import errors

    return psycopg, errors


def test_sqlite_busy_and_locked_are_transient(tmp_path: Path) -> None:
    busy = _sqlite_busy(tmp_path)
    assert busy.sqlite_errorcode & 0xFF == 5  # SQLITE_BUSY
    assert is_transient(busy)


def test_sqlite_errors_that_do_not_heal_are_not_transient(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db")
    assert not is_transient(_raised(lambda: conn.execute("SELECT * FROM missing")))
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"this is not a database" * 100)
    broken = sqlite3.connect(bad)
    assert not is_transient(_raised(lambda: broken.execute("SELECT * FROM sqlite_master")))
    conn.execute("CREATE TABLE t (x UNIQUE)")
    conn.execute("INSERT INTO t VALUES (1)")
    assert not is_transient(_raised(lambda: conn.execute("INSERT INTO t VALUES (1)")))


def test_postgres_admin_shutdown_and_a_closed_connection_are_transient(pg_database: str) -> None:
    psycopg, pg_errors = _psycopg()
    victim = psycopg.connect(pg_database, autocommit=True)
    row = victim.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    with psycopg.connect(pg_database, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
    shutdown = _raised(lambda: victim.execute("SELECT 1"))
    assert isinstance(shutdown, pg_errors.AdminShutdown)
    assert is_transient(shutdown)
    closed = _raised(lambda: victim.execute("SELECT 1"))
    assert type(closed) is psycopg.OperationalError and closed.sqlstate is None  # type: ignore[attr-defined]
    assert is_transient(closed)


def test_postgres_connection_refused_is_transient() -> None:
    psycopg, _ = _psycopg()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    refused = _raised(
        lambda: psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/x", connect_timeout=2)
    )
    assert isinstance(refused, psycopg.OperationalError)
    assert is_transient(refused)


def test_postgres_serialization_failure_and_deadlock_are_transient(pg_database: str) -> None:
    psycopg, pg_errors = _psycopg()
    with psycopg.connect(pg_database, autocommit=True) as setup:
        setup.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
        setup.execute("INSERT INTO t VALUES (1, 0), (2, 0)")
    first = psycopg.connect(pg_database)
    second = psycopg.connect(pg_database)
    try:
        first.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        first.execute("SELECT v FROM t WHERE id = 1").fetchone()
        second.execute("UPDATE t SET v = 1 WHERE id = 1")
        second.commit()
        conflict = _raised(lambda: first.execute("UPDATE t SET v = 2 WHERE id = 1"))
        assert isinstance(conflict, pg_errors.SerializationFailure)
        assert is_transient(conflict)
        first.rollback()

        first.execute("UPDATE t SET v = 3 WHERE id = 1")
        second.execute("UPDATE t SET v = 3 WHERE id = 2")
        outcome: list[BaseException | None] = []

        def cross() -> None:
            try:
                first.execute("UPDATE t SET v = 4 WHERE id = 2")
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        waiter = threading.Thread(target=cross)
        waiter.start()
        time.sleep(0.2)  # first now waits for second's row lock
        mine = None
        try:
            second.execute("UPDATE t SET v = 4 WHERE id = 1")
        except BaseException as exc:
            mine = exc
        waiter.join(timeout=10)
        deadlock = mine if mine is not None else outcome[0]
        assert isinstance(deadlock, pg_errors.DeadlockDetected)
        assert is_transient(deadlock)
    finally:
        first.close()
        second.close()


def test_postgres_errors_that_do_not_heal_are_not_transient(pg_database: str) -> None:
    psycopg, pg_errors = _psycopg()
    from psycopg_pool import ConnectionPool

    with psycopg.connect(pg_database, autocommit=True) as conn:
        assert not is_transient(_raised(lambda: conn.execute("SELECT * FROM missing")))
        conn.execute("CREATE TABLE u (x int UNIQUE)")
        conn.execute("INSERT INTO u VALUES (1)")
        unique = _raised(lambda: conn.execute("INSERT INTO u VALUES (1)"))
        assert isinstance(unique, pg_errors.UniqueViolation) and not is_transient(unique)
    pool = ConnectionPool(pg_database, min_size=1, max_size=1, open=True)
    with pool.connection():
        timed_out = _raised(lambda: pool.getconn(timeout=0.1))
    assert type(timed_out).__name__ == "PoolTimeout" and is_transient(timed_out)
    pool.close()
    closed = _raised(lambda: pool.getconn())
    assert type(closed).__name__ == "PoolClosed" and not is_transient(closed)


def test_our_own_errors_are_decisions_not_accidents(tmp_path: Path) -> None:
    busy = _sqlite_busy(tmp_path)
    assert not is_transient(FencedOutError("run r is owned by another runtime now"))
    assert not is_transient(ValueError("no"))
    corrupt = StoreCorruptionError("damaged")
    corrupt.__cause__ = busy
    assert not is_transient(corrupt)
    wrapped = RuntimeError("a store wrapping the driver's error")
    wrapped.__cause__ = busy
    assert is_transient(wrapped)


# -- the retry -------------------------------------------------------------------------


class Flaky:
    """Fails with a real transient error ``failures`` times, then answers."""

    def __init__(self, error: BaseException, failures: int) -> None:
        self.error = error
        self.failures = failures
        self.calls = 0
        self.deadlines: list[float | None] = []

    def __call__(self, value: str = "ok") -> str:
        self.calls += 1
        self.deadlines.append(retry_deadline())
        if self.calls <= self.failures:
            raise self.error
        return value


class Messages:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def error(self, msg: str, *args: object, **kwargs: object) -> None:
        self.lines.append(msg % args)

    def warning(self, msg: str, *args: object, **kwargs: object) -> None:
        self.lines.append(msg % args)


def test_a_transient_failure_is_retried_until_the_call_succeeds(tmp_path: Path) -> None:
    flaky = Flaky(_sqlite_busy(tmp_path), failures=3)
    log = Messages()
    retry = StoreRetry(5_000, logger=log, first_delay=0.01)
    assert retry.call("save a checkpoint", flaky, "answer") == "answer"
    assert flaky.calls == 4
    assert not retry.failing
    assert any("retrying for up to 5.0 s" in line for line in log.lines)
    assert any("the store is back (save a checkpoint)" in line for line in log.lines)
    # the deadline is set while the store is failing, not before
    assert flaky.deadlines[0] is None and all(d is not None for d in flaky.deadlines[1:])


def test_past_the_budget_the_caller_gets_store_unavailable(tmp_path: Path) -> None:
    busy = _sqlite_busy(tmp_path)
    flaky = Flaky(busy, failures=10_000)
    retry = StoreRetry(300, first_delay=0.01, max_delay=0.05)
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        retry.call("claim a run", flaky)
    assert 0.3 <= time.monotonic() - began < 2.0
    assert caught.value.__cause__ is busy and caught.value.last_error is busy
    assert caught.value.operation == "claim a run" and caught.value.failing_ms >= 300
    assert "claim a run" in str(caught.value)
    # the outage is not over: the next call gets one try, not a budget of its own
    again = Flaky(busy, failures=10_000)
    with pytest.raises(StoreUnavailableError):
        retry.call("renew a lease", again)
    assert again.calls == 1
    # once the store answers, the outage ends and the budget is whole again
    assert retry.call("read a run", Flaky(busy, failures=0)) == "ok"
    assert not retry.failing


def test_an_error_that_does_not_heal_is_raised_at_once() -> None:
    retry = StoreRetry(5_000)
    calls = []

    def broken() -> None:
        calls.append(1)
        raise FencedOutError("run r is owned by another runtime now")

    with pytest.raises(FencedOutError):
        retry.call("update a run", broken)
    assert calls == [1]


def test_a_zero_budget_gives_up_at_the_first_transient_failure(tmp_path: Path) -> None:
    flaky = Flaky(_sqlite_busy(tmp_path), failures=1)
    with pytest.raises(StoreUnavailableError):
        StoreRetry(0).call("save", flaky)
    assert flaky.calls == 1


async def test_the_async_retry_waits_without_blocking_the_loop(tmp_path: Path) -> None:
    busy = _sqlite_busy(tmp_path)
    failures = {"left": 3}
    ticks = []

    async def save() -> str:
        if failures["left"]:
            failures["left"] -= 1
            raise busy
        return "saved"

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.005)

    beat = asyncio.get_running_loop().create_task(ticker())
    retry = StoreRetry(5_000, first_delay=0.05)
    assert await retry.acall("save", save) == "saved"
    beat.cancel()
    assert len(ticks) >= 10  # the loop ran during the 0.35 s of waits
    assert await retry.acall("sync fn", lambda: 7) == 7


def test_invalid_budgets_are_refused() -> None:
    for bad in (-1, 1.5, True, "60"):
        with pytest.raises(ValueError):
            StoreRetry(bad)  # type: ignore[arg-type]
