"""Smoke test: the store benchmark runs (nbdurable only, N = 10 and 100) and prints its table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "store_bench.py"


def test_store_bench_quick_runs_and_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--nbdurable-only", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("config"))
    for column in (
        "total ms",
        "ms/step first 10",
        "ms/step last 10",
        "bytes on disk",
        "history ms",
        "load latest ms",
    ):
        assert column in header
    rows = [
        line.split("|")[0].strip() + " " + line.split("|")[1].strip()
        for line in lines
        if "|" in line and not line.startswith(("config", "cpu"))
    ]
    assert rows == ["no store 10", "nbdurable sqlite 10", "no store 100", "nbdurable sqlite 100"]
    assert "langgraph" not in done.stdout.split("\n\n", 1)[1]
    figures = json.loads(out.read_text())["figures"]
    ours = [f for f in figures if f["config"] == "nbdurable sqlite"]
    assert [f["checkpoints"] for f in ours] == [11, 101]
    assert all(f["bytes_on_disk"] > 0 and f["load_ms"] > 0 for f in ours)
