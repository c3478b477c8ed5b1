"""Smoke test: benchmarks/restate_bench.py --quick runs and prints its table (Temporal's
ratio beside Restate's where the temporal extra and binary are installed)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbdurable.restate._devserver import restate_binary

ROOT = Path(__file__).resolve().parents[2]


def _temporal_installed() -> bool:
    if importlib.util.find_spec("temporalio") is None:
        return False
    from nbdurable.temporal._devserver import temporal_binary

    return temporal_binary() is not None


def test_restate_bench_quick_prints_both_ratios_and_the_resume_time() -> None:
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
    expected = {
        "restate floor, ms per step (4 ctx.run)",
        "nbdurable on Restate, ms per step",
        "restate ratio (nbdurable / floor)",
        "kill-and-resume: restart to next event, s",
        "restate: result() after the run ended, ms",
    }
    if _temporal_installed():
        floor = next(name for name in rows if name.startswith("temporal floor, ms/step ("))
        expected |= {
            floor,
            "nbdurable on Temporal, ms per step",
            "temporal ratio (nbdurable / floor)",
            "temporal: result() after the run ended, ms",
        }
    assert set(rows) == expected
    assert all(value > 0 for name, value in rows.items() if "result()" not in name)
    assert all(value >= 0 for name, value in rows.items() if "result()" in name)
    assert "rounds, restate ms/step:" in done.stderr
