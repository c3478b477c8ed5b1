"""The readiness probe's check of a PostgreSQL store (`store.ping`), and bounded waits.

`ping` runs on a connection of its own: it answers while every pooled connection is taken,
replaces the connection a server restart broke at its first call after the restart, and fails
within its timeout while the server is down; `bounded_wait` cuts the pool's 30-s wait for a
connection short. A real server on 127.0.0.1, restarted and stopped for real.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import PoolTimeout
from support.pgserver import PgServer, find_pg_bin, start_server

from nbdurable.durable._transient import bounded_wait
from nbdurable.stores.postgres import PostgresSessionStore


@pytest.fixture
def own_server() -> Iterator[PgServer]:
    """A server of this test's own: it is stopped and restarted."""
    if find_pg_bin() is None:
        pytest.fail("PostgreSQL is not installed (bash .ci/run installs it)", pytrace=False)
    server = start_server()
    yield server
    server.stop()


def test_ping_never_waits_for_the_pool_and_survives_a_restart(own_server: PgServer) -> None:
    store = PostgresSessionStore(own_server.dsn, min_size=1, max_size=1, timeout=30.0)
    try:
        with store.pool.connection():  # every pooled connection is taken
            began = time.monotonic()
            store.ping(3.0)
            assert time.monotonic() - began < 1.0
        own_server.restart()  # the probe's kept connection is dead now
        store.ping(3.0)  # answered on a fresh connection at once, not failed once first
        own_server.stop_server()
        began = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            store.ping(3.0)
        assert time.monotonic() - began < 3.5
        own_server.start_server()
        store.ping(3.0)
    finally:
        store.close()


def test_bounded_wait_cuts_the_pools_wait_for_a_connection_short(own_server: PgServer) -> None:
    store = PostgresSessionStore(own_server.dsn, min_size=1, max_size=1, timeout=30.0)
    try:
        with store.pool.connection():  # the pool's one connection is taken: a call must wait
            began = time.monotonic()
            with pytest.raises(PoolTimeout), bounded_wait(1.5):
                store.rt_get("some-run")
            assert 1.4 < time.monotonic() - began < 5.0
    finally:
        store.close()
