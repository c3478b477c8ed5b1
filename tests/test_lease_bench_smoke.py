"""Smoke test: the pause-and-takeover benchmark runs (one trial of each kind, SQLite)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "lease_pause_torture.py"


def test_lease_pause_torture_runs_a_trial_of_each_kind(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            *("--stores", "sqlite", "--trials", "1", "--unchecked-trials", "0"),
            *("--kills", "1", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert [(f["variant"], f["once"], f["trials"]) for f in figures["pause"]] == [
        ("careful", 1, 1),
        ("threaded", 1, 1),
    ]
    [kill] = figures["kill"]
    assert kill["completed"] == 1  # how fast is the benchmark's figure, not a test's
    assert "kill to claim" in done.stdout
