"""Reaching the PostgreSQL server: the driver, the DSN, the pool (transactions: :mod:`._db`).

psycopg is imported when a store is created (:func:`driver`), not when this
module is.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..._errors import ConfigurationError
from ...durable._transient import retry_deadline

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = [
    "DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT",
    "describe",
    "driver",
    "limit_idle_transactions",
    "notify_channel",
    "open_pool",
    "ping_pool",
    "Prober",
    "pool_sizes",
    "split_query",
    "split_schema",
    "work_channel",
]


_EXTRA = "nbdurable[postgres]"
_CHANNEL_PREFIX = "nbdurable_events:"
_WORK_PREFIX = "nbdurable_work:"
_MAX_IDENTIFIER = 63  # bytes: PostgreSQL's NAMEDATALEN - 1
_LEAST_WAIT = 1.0  # s a call waits for a connection at least, past its retry's deadline too
_WAIT_SLICE = 0.5  # s between looks at the retry's deadline while a call waits

DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT = 10.0
"""Seconds the server lets one of the store's sessions sit idle inside a transaction.

The store's transactions hold row locks for a few milliseconds of client work.
A process paused in one (SIGSTOP, a debugger, a laptop lid, a frozen VM) would
hold them until it continued: no other worker could take its run over, and a
submission to its session would wait for it. Past this timeout the
server ends that session and its locks go; the paused process finds its
connection closed when it wakes, a transient failure that a retrying caller (the
runtime, a session with ``store_retry_ms``) sends again on a fresh connection.
"""


def notify_channel(schema: str) -> str:
    """``nbdurable_events:<schema>``, or a digest of the schema when that is too long."""
    channel = _CHANNEL_PREFIX + schema
    if len(channel.encode()) <= _MAX_IDENTIFIER:
        return channel
    return _CHANNEL_PREFIX + hashlib.sha256(schema.encode()).hexdigest()[:40]


def work_channel(schema: str) -> str:
    """``nbdurable_work:<schema>``: where writes that make a run claimable notify idle workers."""
    channel = _WORK_PREFIX + schema
    if len(channel.encode()) <= _MAX_IDENTIFIER:
        return channel
    return _WORK_PREFIX + hashlib.sha256(schema.encode()).hexdigest()[:40]


@functools.lru_cache(maxsize=1)
def pool_class(pool_module: Any) -> Any:
    """The pool the store uses: psycopg_pool's, waiting no longer than a store retry allows."""

    class Pool(pool_module.ConnectionPool):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.prober = Prober(self)

        def close(self, timeout: float = 5.0) -> None:
            self.prober.close()
            super().close(timeout)

        def getconn(self, timeout: float | None = None) -> Any:
            # During an outage, or once a shutdown cut retries short, a call
            # under a StoreRetry waits for a connection only until the retry
            # gives up, not the pool's whole timeout. The wait is made in short
            # slices, each bounded by the retry's deadline as it is then: an
            # outage or a shutdown that begins while a call waits ends its wait
            # too. A call after the budget is spent still gets a short wait: a
            # server that is back is reconnected to within about 2 s.
            start = time.monotonic()
            end = start + (self.timeout if timeout is None else timeout)
            while True:
                limit = end
                deadline = retry_deadline()
                if deadline is not None:
                    limit = min(end, max(deadline, start + _LEAST_WAIT))
                left = limit - time.monotonic()
                if left <= 0:
                    waited = time.monotonic() - start
                    raise pool_module.PoolTimeout(
                        f"couldn't get a connection after {waited:.2f} sec"
                    )
                try:
                    return super().getconn(min(left, _WAIT_SLICE))
                except pool_module.PoolTimeout:
                    continue  # the next slice, or the timeout above

    return Pool


class Prober:
    """The readiness probe's connection: its own, not one of the pool's.

    A probe that borrowed a pooled connection would queue behind every call
    waiting for one (the pool serves them in turn; during an outage the
    runtime's retrying calls fill that queue) and would depend on the pool's
    reconnect backoff. This one opens its own connection (``connect_timeout``
    bounded), keeps it between probes, and replaces it when a server restart
    broke it. A probe that succeeds after one that failed asks the pool to
    check its connections, so connections the restart broke are replaced now.
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._lock = threading.Lock()
        self._conn: Any = None
        self._failed = False

    def ping(self, statement: str, params: tuple[Any, ...], timeout: float) -> None:
        """Run ``statement`` (a read) on the probe's connection within about ``timeout`` seconds.

        Raises:
            TimeoutError: The previous probe still holds the connection.
            psycopg.OperationalError: The server cannot be reached.
        """
        if not self._lock.acquire(timeout=timeout):
            raise TimeoutError("the previous store probe has not returned")
        try:
            try:
                self._run(statement, params, timeout)
            except Exception:
                kept = self._conn is not None
                self._drop()
                if not kept:
                    raise
                # The connection kept from the last probe may be one a restart
                # broke: one fresh connection tells whether the server is back
                # (and the pool's connections are likely broken too).
                self._failed = True
                self._run(statement, params, timeout)
        except BaseException:
            self._failed = True
            raise
        finally:
            self._lock.release()
        if self._failed:
            self._failed = False
            reconnect_failed(self.pool)

    def _run(self, statement: str, params: tuple[Any, ...], timeout: float) -> None:
        if self._conn is None:
            conn = self.pool.connection_class.connect(
                self.pool.conninfo, autocommit=True, connect_timeout=max(1, round(timeout))
            )
            self._conn = conn
            # The server gives up on the probe's read too, should it hang.
            milliseconds = str(max(1, round(timeout * 1000)))
            conn.execute("SELECT set_config('statement_timeout', %s, false)", (milliseconds,))
        self._conn.execute(statement, params).fetchall()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(Exception):
                conn.close()

    def close(self) -> None:
        """Close the probe's connection (the next probe opens another)."""
        with self._lock:
            self._drop()


def ping_pool(pool: Any, statement: str, params: tuple[Any, ...], timeout: float) -> None:
    """:meth:`Prober.ping` of the store's pool (see :func:`open_pool`)."""
    pool.prober.ping(statement, params, timeout)


def limit_idle_transactions(
    seconds: float | None, then: Callable[[Any], None] | None = None
) -> Callable[[Any], None] | None:
    """A pool ``configure`` callback: ``idle_in_transaction_session_timeout`` on each connection.

    Set to ``seconds`` only where the session's value is 0 (off): a timeout the
    DSN's ``options``, ``PGOPTIONS``, the role or the database chose stands.

    Args:
        seconds: The timeout; ``None`` leaves the session's setting as it is.
        then: A ``configure`` callback of the caller's, called afterwards.
    """
    if seconds is None:
        return then
    if seconds <= 0:
        raise ConfigurationError(f"idle_in_transaction_timeout must be positive, not {seconds!r}")
    milliseconds = str(max(1, round(seconds * 1000)))

    def configure(conn: Any) -> None:
        conn.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, false)"
            " WHERE current_setting('idle_in_transaction_session_timeout') = '0'",
            (milliseconds,),
        )
        if then is not None:
            then(conn)

    return configure


def reconnect_failed(pool: Any) -> None:
    """Try again at once: ``check()`` grows an empty pool with a fresh attempt."""
    with suppress(Exception):  # a closed pool: nothing to do
        pool.check()


def driver() -> tuple[Any, Any]:
    """The ``psycopg`` and ``psycopg_pool`` modules, imported now.

    Raises:
        ConfigurationError: The ``nbdurable[postgres]`` extra is not installed.
    """
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ConfigurationError(
            f"PostgresSessionStore needs the {_EXTRA} extra (pip install '{_EXTRA}'): {exc}"
        ) from exc
    return psycopg, psycopg_pool


def open_pool(
    pool_module: Any,
    conninfo: str,
    *,
    name: str,
    sizes: tuple[int, int],
    timeout: float,
    configure: Callable[[Any], None] | None,
    pool_kwargs: Mapping[str, Any] | None,
) -> ConnectionPool[Connection[tuple[Any, ...]]]:
    """The store's pool, open: autocommit connections, reconnecting after a lost server.

    ``pool_kwargs`` override the defaults; ``configure`` (which calls the
    caller's own ``configure``, see :func:`limit_idle_transactions`) replaces it.
    """
    options: dict[str, Any] = {
        # After a lost server, connection attempts back off 1, 2, 4... s and
        # give up after reconnect_timeout; each give-up starts a fresh
        # attempt (reconnect_failed), so a server that comes back is
        # reconnected to within about 2 s, however long it was away.
        "reconnect_timeout": 5.0,
        "reconnect_failed": reconnect_failed,
        **dict(pool_kwargs or {}),
        "configure": configure,
    }
    pool: ConnectionPool[Connection[tuple[Any, ...]]] = pool_class(pool_module)(
        conninfo,
        min_size=sizes[0],
        max_size=sizes[1],
        timeout=timeout,
        kwargs={"autocommit": True},
        open=False,
        name=name,
        **options,
    )
    pool.open()
    return pool


def split_schema(dsn: str) -> tuple[str, str | None]:
    """Take ``schema=`` out of a URL's query (libpq would refuse it)."""
    return split_query(dsn, "schema")


def split_query(dsn: str, name: str) -> tuple[str, str | None]:
    """Take ``name=`` (an option of this store, not libpq's) out of a URL's query."""
    if dsn.partition("://")[0].lower() not in ("postgresql", "postgres"):
        return dsn, None
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    values = [value for key, value in query if key == name]
    if not values:
        return dsn, None
    rest = urlencode([(key, value) for key, value in query if key != name])
    return urlunsplit(parts._replace(query=rest)), values[-1]


def pool_sizes(dsn: str, sizes: tuple[int, int]) -> tuple[str, tuple[int, int]]:
    """``pool_max=N`` of a URL's query (taken out) as the pool's largest size.

    A worker opened from a URL (``nbdurable worker --store URL``) has no other
    way to bound its pool; ``min_size`` is lowered to it where larger.

    Raises:
        ConfigurationError: ``pool_max`` is not a positive integer.
    """
    rest, value = split_query(dsn, "pool_max")
    if value is None:
        return dsn, sizes
    if not value.isdigit() or int(value) < 1:
        raise ConfigurationError(f"pool_max must be a positive integer, not {value!r}")
    largest = int(value)
    return rest, (min(sizes[0], largest), largest)


def describe(psycopg: Any, conninfo: str) -> str:
    """``host:port/dbname`` of a DSN, without its password (for messages and repr)."""
    try:
        params: dict[str, Any] = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(f"invalid PostgreSQL DSN: {exc}") from exc
    host = params.get("host") or "localhost"
    port = f":{params['port']}" if params.get("port") else ""
    return f"postgresql://{host}{port}/{params.get('dbname') or ''}"
