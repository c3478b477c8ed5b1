"""``nbdurable demo --engine restate``: the seed's lab in the terminal, end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbdurable.restate._devserver import restate_binary

ROOT = Path(__file__).resolve().parents[2]


def test_the_restate_demo_crashes_resumes_and_completes(tmp_path: Path) -> None:
    pytest.importorskip("restate", reason="the restate extra is not installed")
    if restate_binary() is None:
        pytest.skip("the `restate-server` binary is missing")
    done = subprocess.run(
        [sys.executable, "-m", "nbdurable.cli", "demo", "--engine", "restate", "--yes"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "== crash: the endpoint was killed by SIGKILL" in out
    assert "== recover:" in out and "completed in" in out
    recovered = out.split("== recover:")[1]
    assert "list_tables:" not in recovered  # step 0 was replayed from the journal
