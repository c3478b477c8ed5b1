"""The PostgreSQL store's connection: one schema, its pool, its transactions.

Every part of the store (checkpoints, run records, the event log) holds the one
:class:`PostgresDb` of its schema.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext, suppress
from typing import TYPE_CHECKING, Any, TypeVar

from ..._errors import ConfigurationError
from ._connect import (
    describe,
    driver,
    limit_idle_transactions,
    notify_channel,
    open_pool,
    pool_sizes,
    split_schema,
    work_channel,
)
from ._schema import migrate
from ._sql import Statements

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresDb"]

T = TypeVar("T")


class PostgresDb:
    """A migrated schema and the pool of connections to it (arguments as the store's).

    Raises:
        ConfigurationError: The extra is missing, or ``schema`` is given twice.
        CheckpointVersionError: The database's schema is newer than this nbdurable.
        psycopg.OperationalError: The server cannot be reached.
    """

    def __init__(
        self,
        dsn: str,
        schema: str | None,
        sizes: tuple[int, int],
        timeout: float,
        idle_in_transaction_timeout: float | None,
        pool_kwargs: Mapping[str, Any] | None,
    ) -> None:
        psycopg, pool_module = driver()
        configure = limit_idle_transactions(
            idle_in_transaction_timeout, (pool_kwargs or {}).get("configure")
        )
        dsn, sizes = pool_sizes(dsn, sizes)
        conninfo, from_url = split_schema(dsn)
        if schema is not None and from_url is not None and schema != from_url:
            raise ConfigurationError(
                f"schema given twice: {schema!r} as an argument, {from_url!r} in the URL"
            )
        chosen = schema if schema is not None else from_url
        self.schema: str = "nbdurable" if chosen is None else chosen
        self.q = Statements.for_schema(self.schema)
        self.where = describe(psycopg, conninfo)
        self.notify_channel: str = notify_channel(self.schema)
        self.work_channel: str = work_channel(self.schema)
        self.conninfo = conninfo
        # Pipeline mode needs libpq 14 (the binary wheel bundles a newer one).
        self.pipelined: bool = psycopg.Pipeline.is_supported()
        # A direct connection first: a wrong DSN fails at once with libpq's
        # message, instead of the pool retrying in the background until timeout.
        with psycopg.connect(conninfo, autocommit=True) as conn:
            migrate(conn, self.schema, f"{self.where} (schema {self.schema!r})")
        self.pool: ConnectionPool[Connection[tuple[Any, ...]]] = open_pool(
            pool_module,
            conninfo,
            name=f"nbdurable:{self.schema}",
            sizes=sizes,
            timeout=timeout,
            configure=configure,
            pool_kwargs=pool_kwargs,
        )

    @contextmanager
    def transaction(
        self, conn: Connection[tuple[Any, ...]], begin: str = "BEGIN"
    ) -> Iterator[None]:
        """One transaction on ``conn``, in one round trip when pipelined; rolled back on error."""
        # BEGIN and COMMIT are sent as statements in the pipeline (psycopg's
        # conn.transaction() waits for the server at both ends), so the whole
        # transaction costs one round trip; results are read after it.
        try:
            with conn.pipeline() if self.pipelined else nullcontext():
                conn.execute(begin)
                yield
                conn.execute("COMMIT")
        except BaseException:
            with suppress(Exception):  # a broken connection: the pool drops it
                conn.rollback()
            raise

    def transact(self, work: Callable[[Connection[tuple[Any, ...]]], T], attempts: int = 5) -> T:
        """Run ``work`` on a pooled connection; again after a deadlock or serialization failure."""
        # Saves and deletes take their locks in one order, so a deadlock or a
        # serialization failure should not happen; retry one anyway, since the
        # transaction rolled back whole.
        from psycopg.errors import TransactionRollback

        for attempt in range(attempts):
            try:
                with self.pool.connection() as conn:
                    return work(conn)
            except TransactionRollback:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.01 * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover
