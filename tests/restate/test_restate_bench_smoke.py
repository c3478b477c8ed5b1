"""Smoke test: benchmarks/restate_bench.py --quick runs and prints its table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbdurable.restate._devserver import restate_binary

ROOT = Path(__file__).resolve().parents[2]


def test_restate_bench_quick_prints_the_ratio_and_the_resume_time() -> None:
    pytest.importorskip("restate", reason="the restate extra is not installed")
    if restate_binary() is None:
        pytest.skip("the `restate-server` binary is missing")
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "restate_bench.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT / "benchmarks",
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line[:44].strip(): float(line[44:]) for line in done.stdout.splitlines()[1:]}
    assert set(rows) == {
        "floor: bare handler, ms per step (4 ctx.run)",
        "nbdurable on Restate, ms per step",
        "ratio (nbdurable / floor)",
        "kill-and-resume: restart to next event, s",
    }
    assert all(value > 0 for value in rows.values())
