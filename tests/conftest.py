"""Shared fixtures: a deterministic clock and id generator for the loop, and the
PostgreSQL server (one per test session) with a fresh database per test; the test tiers.

Tiers: every test that needs more than this interpreter gets a marker here, centrally
(by its directory, the fixtures it uses, its parameters and what its module starts), so
a test keeps its tier when it moves: ``postgres`` (the PostgreSQL server), ``temporal``
(the Temporal dev server), ``browser`` (Chromium and a Jupyter server), ``notebook`` (a
real kernel), ``process`` (starts other processes: the CLI, workers, harnesses),
``slow`` (in-process but seconds long) and ``serial`` (must not share the machine: it
measures time or load). A plain ``pytest`` deselects them all (the fast tier,
``addopts`` in pyproject.toml); ``.ci/run`` runs every tier.

When PostgreSQL is not installed its tests fail with a message saying how to
get it (``.ci/run`` installs it); ``NBDURABLE_SKIP_POSTGRES=1`` skips them on purpose.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from support.pgserver import PgServer, find_pg_bin, start_server

import nbdurable as nd


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
    from nbdurable.cli.logs import reset_logging

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


# -- tiers -----------------------------------------------------------------------------

TIERS = ("postgres", "temporal", "browser", "notebook", "process", "slow", "serial")
"""The markers a plain ``pytest`` deselects (pyproject.toml's ``addopts``)."""

_TESTS = Path(__file__).resolve().parent

_BY_DIRECTORY = {"temporal": "temporal", "browser": "browser"}
"""A directory under tests/ whose every test needs one service."""

_BY_FIXTURE = {
    "pg_server": "postgres",
    "pg_database": "postgres",
    "temporal_server": "temporal",
    "browser": "browser",
    "page": "browser",
    "jupyter": "browser",
    "voila_server": "browser",
    "stdio_server": "process",
    "http_server": "process",
}
"""Fixtures (direct or through other fixtures) that start a server or a process."""

_BY_PARAMETER = {"postgres": "postgres"}
"""A parameter id (``test_x[postgres]``) that picks a service at run time
(``request.getfixturevalue("pg_database")``)."""

_BY_SOURCE = {
    # a PostgreSQL server of the test's own (outages: stopped and restarted)
    "postgres": re.compile(r"from support\.pgserver import [^\n]*\bstart_server\b"),
    # a real kernel: nbclient, jupyter_client, or the shared demo-notebook runner
    "notebook": re.compile(r"\bnbclient\b|\bjupyter_client\b|KernelManager|\bexecute_twice\b"),
    # a child process: the CLI, a worker, a harness, a server in its own interpreter
    "process": re.compile(
        r"\bsubprocess\b|\bmultiprocessing\b|\bPopen\b|create_subprocess_exec|"
        r"sys\.executable|os\.fork\b|support\.(?:crash|lease|broken|damage|pg_restart|"
        r"tracing|verdict_race|runtime)_harness"
    ),
}
"""What a test module's source says it starts (read once per module)."""

_BY_FUNCTION_SOURCE = {"browser": re.compile(r"\bplaywright\b")}
"""What one test function's own source says it starts (a module of fast tests with one
browser test)."""


@cache
def _source_tiers(path: Path) -> frozenset[str]:
    try:
        text = path.read_text()
    except OSError:
        return frozenset()
    return frozenset(tier for tier, pattern in _BY_SOURCE.items() if pattern.search(text))


def tiers_of(item: pytest.Item) -> set[str]:
    """The tiers one collected test belongs to (empty: the fast tier)."""
    found: set[str] = {m.name for m in item.iter_markers() if m.name in TIERS}
    path = Path(str(item.path))
    try:
        parts = path.relative_to(_TESTS).parts
    except ValueError:
        parts = ()
    if parts and parts[0] in _BY_DIRECTORY:
        found.add(_BY_DIRECTORY[parts[0]])
    for name in getattr(item, "fixturenames", ()):
        if name in _BY_FIXTURE:
            found.add(_BY_FIXTURE[name])
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        for part in re.split(r"[-\[\]]", callspec.id):
            if part in _BY_PARAMETER:
                found.add(_BY_PARAMETER[part])
    found |= _source_tiers(path)
    function = getattr(item, "function", None)
    if function is not None:
        found |= _function_tiers(function)
    return found


@cache
def _function_tiers(function: Any) -> frozenset[str]:
    try:
        text = inspect.getsource(function)
    except (OSError, TypeError):
        return frozenset()
    return frozenset(tier for tier, pattern in _BY_FUNCTION_SOURCE.items() if pattern.search(text))


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tiers, so ``-m`` selects them (see the module docstring)."""
    for item in items:
        for tier in tiers_of(item):
            item.add_marker(tier)
