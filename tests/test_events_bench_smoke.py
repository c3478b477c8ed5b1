"""Smoke test: the event-log benchmark runs (``--quick``) and prints its tables and targets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "events_bench.py"

# serial: a benchmark: it measures
pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX only, like the benchmark"),
    pytest.mark.serial,
]


def test_events_bench_quick_runs_and_reports_every_target(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    for heading in ("(a) persisted deltas per second", "append_events", "(b) delta-to-visible"):
        assert heading in done.stdout
    verdicts = [
        line for line in done.stdout.splitlines() if line.rstrip().endswith(("PASS", "FAIL"))
    ]
    assert len(verdicts) == 3, done.stdout
    figures = json.loads(out.read_text())
    assert [t["deltas"] for t in figures["throughput"]] == [2_000] * 3
    assert [a["batch"] for a in figures["append_events"]] == [1, 10, 100]
    subscribers = figures["latency"]["subscribers"]
    assert len(subscribers) == 3 and all(
        s["deltas"] == figures["latency"]["deltas"] for s in subscribers
    )
    assert all(0 < s["p50_ms"] <= s["p99_ms"] <= s["max_ms"] for s in subscribers)
