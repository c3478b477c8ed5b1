"""Shared fixtures: a deterministic clock and id generator for the loop."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import pytest

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
    logging.getLogger("nbdurable").setLevel(logging.CRITICAL)
