"""The README's main job: the quickstart example runs offline from a clean directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_suspends_then_resumes_with_a_signed_verdict(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "status=suspended" in out.stdout
    assert "status=completed" in out.stdout
    assert "dropped=['stg_2023']" in out.stdout
    assert "text='Done: dropped stg_2023, kept stg_2024.'" in out.stdout


def test_quickstart_with_deny_keeps_the_table_and_says_so(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--deny"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Denied (Keep it for the audit.), so I kept stg_2023" in out.stdout
    assert "dropped=[]" in out.stdout
