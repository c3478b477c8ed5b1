"""One install runs every notebook (issue 36): the ``demos`` extra, each notebook's
``needs(...)`` line, Binder's requirements, and the one line a missing extra gives."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from nbdurable.notebook._needs import EXTRA_MODULES

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.ipynb"))
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement (PEP 503)."""
    name = re.split(r"[\[<>=!~; ]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(extra: str) -> set[str]:
    """Every distribution ``nbdurable[extra]`` installs (extras of extras followed)."""
    names: set[str] = set()
    for requirement in EXTRAS[extra]:
        if requirement.startswith("nbdurable["):
            for inner in requirement[len("nbdurable[") : requirement.index("]")].split(","):
                names |= _requirements(inner.strip())
        else:
            names.add(_name(requirement))
    return names


def _needs(path: Path) -> tuple[str, ...]:
    """The extras named by the ``needs(...)`` call of a notebook's first code cell."""
    cells = json.loads(path.read_text())["cells"]
    first = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
    (line,) = [line for line in first.splitlines() if line.startswith("needs(")]
    call = ast.parse(line.split("#")[0]).body[0].value  # type: ignore[attr-defined]
    return tuple(arg.value for arg in call.args)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_checks_its_needs_first_and_demos_brings_them(path: Path) -> None:
    needs = _needs(path)
    assert "notebook" in needs
    demos = _requirements("demos")
    for extra in needs:
        assert extra in EXTRA_MODULES
        assert _requirements(extra) <= demos, (extra, _requirements(extra) - demos)


def test_binder_requirements_cover_the_demos_extra() -> None:
    pinned = {
        _name(line)
        for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    base = {
        _name(r)
        for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    assert _requirements("demos") | base <= pinned, (_requirements("demos") | base) - pinned


def test_binder_readme_is_current() -> None:
    readme = (ROOT / "binder" / "README.md").read_text()
    assert "seven" not in readme and f"{len(NOTEBOOKS)}/{len(NOTEBOOKS)}" in readme


def _ipython(code: str, without: str) -> subprocess.CompletedProcess[str]:
    """``code`` run as one IPython cell in a new process where ``without`` is not installed."""
    script = (
        "import sys\n"
        f"for name in {without!r}.split(','):\n"
        "    sys.modules[name] = None\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance(colors='NoColor')\n"
        "result = shell.run_cell(sys.argv[1])\n"
        "sys.exit(0 if result.success else 3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", script, code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_missing_extra_stops_the_first_cell_with_one_line() -> None:
    done = _ipython(
        'from nbdurable.notebook import needs\nneeds("notebook", "server")', "fastapi,uvicorn"
    )
    assert done.returncode == 3  # the cell failed: Run All stops there
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith(
        "nbdurable: this notebook needs nbdurable[notebook], nbdurable[server]"
    )
    assert "missing: fastapi, uvicorn" in lines[0] and "pip install 'nbdurable[demos]'" in lines[0]
    assert "Traceback" not in done.stdout + done.stderr


def test_nothing_missing_is_silent() -> None:
    done = _ipython('from nbdurable.notebook import needs\nneeds("notebook", "server")', "none_x")
    assert done.returncode == 0 and done.stdout.strip() == "", done


README = (ROOT / "README.md").read_text()


def test_readme_binder_badge_points_at_the_repository_of_project_urls() -> None:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    repository = urls["Repository"].removeprefix("https://github.com/")
    (badge,) = re.findall(r"https://mybinder\.org/v2/gh/([^/]+/[^/]+)/HEAD\S*01-quickstart", README)
    assert badge == repository


def test_readme_first_screen_is_sentence_install_example_picture_links() -> None:
    head = README[: README.index("## Set-up")]
    sentence = head.split("\n\n")[1]
    assert len(sentence.split()) <= 45, sentence
    install = head.index("pip install -e '.[demos]'")
    example = re.search(r"```python\n(.*?)```", head, re.S)
    assert example is not None and install < example.start()
    assert len(example.group(1).strip().splitlines()) <= 16
    assert "nd.Agent(" in example.group(1) and "nd.DurableRuntime" in example.group(1)
    assert example.end() < head.index("![The run widget") < head.index("docs/features.md")
    assert "generate_text" not in head and "resume_from_checkpoint" not in head


def test_docs_link_nothing_outside_the_repository() -> None:
    for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "binder" / "README.md"]:
        text = doc.read_text()
        assert "../shared" not in text and "DESIGN.md" not in text, doc
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if target.startswith(("https://", "http://", "mailto:")):
                continue  # a web page; what the issue forbids is a path leaving the checkout
            assert (doc.parent / target).resolve().is_relative_to(ROOT), (doc, target)
            assert (doc.parent / target).exists(), (doc, target)


def test_readme_says_the_demo_asks_once_and_how_to_skip_it() -> None:
    assert "[y/N]" in README and "nbdurable demo --yes" in README
