"""Crash safety: writers killed with SIGKILL mid-save lose nothing they committed.

The long version is ``benchmarks/crash_torture.py``.
"""

from __future__ import annotations

import sys

import pytest
from support.crash_harness import EDIT_EVERY, expected, torture

import nbdurable as nd
from nbdurable.durable import PERSISTENT, supports

from .conftest import StoreCase

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")

KILLS = 5


def test_sigkilled_writers_lose_no_committed_checkpoint(store_case: StoreCase) -> None:
    probe = store_case.open()
    persistent = supports(probe, PERSISTENT)
    probe.close()
    if not persistent:
        pytest.skip(f"{store_case.backend.name} does not declare {PERSISTENT!r}")
    report = torture(store_case.url, "crash::run#1", KILLS, seed=len(store_case.url))
    assert report.kills == KILLS
    assert report.committed > 0 and report.steps_verified >= report.committed
    # the run went on across the kills: each writer resumed where the last one stopped
    assert report.latest_steps == sorted(report.latest_steps)
    store = store_case.open()
    try:
        latest = store.load("crash::run#1")
        assert latest is not None and latest == expected("crash::run#1", latest.step_index)
    finally:
        store.close()


def test_the_harness_expectations_are_deterministic_and_carry_bytes() -> None:
    a, b = expected("r", 30), expected("r", 30)
    assert a == b and len(a.messages) == 1 + 2 * (30 % EDIT_EVERY + 1)
    assert any(isinstance(p, nd.ImagePart) and p.data for m in a.messages for p in m.content)
