"""The docs' recipe for a store of one's own runs the conformance suite in a fresh pytest."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "stores.md"


def test_the_recipe_in_the_docs_proves_a_store(tmp_path: Path) -> None:
    text = DOCS.read_text(encoding="utf-8")
    [recipe] = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "test_my_store" in b]
    (tmp_path / "test_my_store.py").write_text(recipe)
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_store.py"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    passed = int(re.search(r"(\d+) passed", result.stdout).group(1))  # type: ignore[union-attr]
    assert passed >= 30, result.stdout  # the checkpoint, run-record and commit tests ran
