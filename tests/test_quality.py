"""ruff and mypy (strict) stay clean: configured in pyproject.toml, checked here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_is_clean() -> None:
    lint = _run("ruff", "check", ".")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    style = _run("ruff", "format", "--check", ".")
    assert style.returncode == 0, style.stdout + style.stderr


def test_mypy_strict_is_clean() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
