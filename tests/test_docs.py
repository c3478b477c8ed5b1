"""Docs that tests keep honest: every python block in the README and docs/ runs."""

from __future__ import annotations

import ast
import asyncio
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_python_blocks_run(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A doc's blocks run in order in one namespace, top-level await allowed: like notebook cells.

    Copied into a script that closes its loop at the end, they leave no task
    pending ("Task was destroyed but it is pending!"): what they open, they close.
    """
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    loop = asyncio.new_event_loop()
    try:
        for i, match in enumerate(BLOCK.finditer(doc.read_text())):
            where = f"{doc.name} block {i + 1}"
            code = compile(match.group(1), where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            outcome = eval(code, namespace)
            if asyncio.iscoroutine(outcome):
                loop.run_until_complete(outcome)
        loop.run_until_complete(asyncio.sleep(0.05))  # let what was closed settle
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        assert not pending, f"{doc.name} leaves tasks pending: {pending}"
    finally:
        loop.close()


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```bash\n(.*?)\n```", text, re.S | re.M)


def test_readme_has_the_two_setup_commands_and_ci_runs_the_test_one() -> None:
    commands = _readme_commands()
    assert len(commands) >= 2
    main_job, test_command = commands[0], commands[1]
    assert "examples/quickstart.py" in main_job or "jupyter" in main_job
    assert shlex.split(test_command) == ["bash", ".ci/run"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1] == "python -m pytest -q"  # the suite itself, after the set-up


def test_docs_site_builds_strictly(tmp_path: Path) -> None:
    """The docs/ pages and the API reference from the docstrings build with no warning
    (a broken link or a stale API reference fails; the `docs` dependency group)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "DurableRuntime" in api and "open_store" in api
