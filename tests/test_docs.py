"""Docs that tests keep honest: every python block in the README and docs/ runs."""

from __future__ import annotations

import ast
import asyncio
import re
import shlex
import tomllib
from pathlib import Path

import pytest
from conftest import TIERS
from support.tiers import OPTIONAL_MODULES

from nbdurable import ConfigurationError

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
            try:
                outcome = eval(code, namespace)
                if asyncio.iscoroutine(outcome):
                    loop.run_until_complete(outcome)
            except ModuleNotFoundError as missing:
                if (missing.name or "").split(".")[0] not in OPTIONAL_MODULES:
                    raise
                pytest.skip(f"{where} needs {missing.name}, which is not installed")
            except ConfigurationError as error:  # a missing package's "pip install" line
                if "pip install" not in str(error):
                    raise
                pytest.skip(f"{where}: {error}")
        loop.run_until_complete(asyncio.sleep(0.05))  # let what was closed settle
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        assert not pending, f"{doc.name} leaves tasks pending: {pending}"
    finally:
        loop.close()


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"^```bash\n(.*?)\n```", text, re.S | re.M)


def _ci_pytest_commands() -> list[list[str]]:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [
        shlex.split(line.split("||")[0]) for line in lines if line.startswith("python -m pytest")
    ]


def _selects(command: list[str], marks: set[str]) -> bool:
    """Whether a pytest command line selects a test carrying ``marks`` (its last
    ``-m`` wins, pyproject.toml's ``addopts`` first)."""
    from _pytest.mark.expression import Expression

    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    words = shlex.split(addopts["ini_options"]["addopts"]) + command
    expressions = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "-m"]
    expression = expressions[-1] if expressions else ""
    if not expression:
        return True
    return Expression.compile(expression).evaluate(lambda name, **_: name in marks)


def test_readme_has_the_setup_commands_and_ci_runs_every_tier() -> None:
    commands = _readme_commands()
    assert len(commands) >= 3
    main_job, suite, fast = commands[0], commands[1], commands[2]
    assert "examples/quickstart.py" in main_job or "jupyter" in main_job
    assert shlex.split(suite) == ["bash", ".ci/run"]
    assert shlex.split(fast) == ["python", "-m", "pytest"]
    # the contributor's command is the fast tier: no test of any other tier
    for tier in TIERS:
        assert not _selects(["-q"], {tier}), f"a plain pytest runs the {tier} tier"
    assert _selects(["-q"], set())
    # .ci/run runs every tier: a test with any one tier, or none, or serial with
    # another, is selected by one of its pytest commands
    ci = _ci_pytest_commands()
    assert ci, ".ci/run runs no pytest command"
    for marks in [set(), *({tier} for tier in TIERS), *({tier, "serial"} for tier in TIERS)]:
        assert any(_selects(command[3:], marks) for command in ci), f".ci/run skips {marks}"


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
