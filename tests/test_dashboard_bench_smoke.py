"""Smoke test: the dashboard benchmark runs (``--quick``) and prints its figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "dashboard_bench.py"

pytest.importorskip("anywidget")


def test_dashboard_bench_quick_fills_a_store_and_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "200 runs, 10 pending approvals" in done.stdout
    for row in ("read (cold)", "page: last page", "query message", "event-loop stall"):
        assert row in done.stdout
    figures = json.loads(out.read_text())["figures"]
    assert figures["runs"] == 200 and figures["approvals"] == 10
    assert 0 < figures["page_bytes"] < figures["all_rows_bytes"]
    assert all(ms > 0 for ms in figures["page_ms"].values())
