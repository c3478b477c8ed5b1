"""Smoke test: the long-run benchmark runs (tiny N) and prints its table and ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "long_run.py"


def test_long_run_bench_prints_deciles_ratios_and_rss(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--steps", "40", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("config"))
    for column in ("first decile ms", "last decile ms", "ratio", "RSS +MB", "commits/step"):
        assert column in header
    rows = [line.split("|")[0].strip() for line in lines if "|" in line and line != header]
    assert rows == ["no store", "sqlite session", "runtime sqlite"]
    assert any(line.startswith("sqlite session: a step in the last decile costs") for line in lines)
    figures = json.loads(out.read_text())["figures"]
    assert [f["config"] for f in figures] == ["no store", "sqlite session", "runtime sqlite"]
    for f in figures:
        assert f["steps"] == 40
        assert f["first_decile_ms"] > 0 and f["last_decile_ms"] > 0
        assert f["ratio"] == f["last_decile_ms"] / f["first_decile_ms"]
        assert f["first_decile_cpu_ms"] > 0 and f["last_decile_cpu_ms"] > 0
    commits = {f["config"]: f["commits_per_step"] for f in figures}
    assert commits["no store"] is None
    # generate_text with a session: the model's response and its tool calls in one
    # commit, the step's checkpoint in the other (plus the leg's start and end)
    assert 1.9 <= commits["sqlite session"] <= 2.2, commits
    assert commits["runtime sqlite"] > 0
