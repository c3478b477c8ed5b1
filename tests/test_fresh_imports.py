"""Every module of the package imports alone, as the first thing a fresh interpreter does.

A fresh interpreter per module is slow (the package's ``__init__`` runs each
time), so a few interpreters run side by side, each importing its share of the
modules one after the other. Before each import, every ``nbdurable`` module that
``import nbdurable`` itself did not load is forgotten (and unbound from its
parent package), so each module starts from the state a fresh interpreter
reaches after its first implicit step, importing the package. Third-party
modules stay loaded: they cannot hide an import order problem of ours.

``__main__`` modules are left out by name: importing one runs the command
(``python -m nbdurable.cli``); the CLI tests run it. A module whose optional
extra is not installed is skipped with the missing module named (CI installs
every extra, so there it must import).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nbdurable"
WORKERS = 4
NOT_IMPORTED = frozenset({"nbdurable.cli.__main__"})
"""Modules that run a program when imported."""

_IMPORT_EACH = r"""
import importlib, json, sys, traceback

import nbdurable

baseline = set(sys.modules)


def forget_since_baseline():
    for name in sorted(set(sys.modules) - baseline, reverse=True):
        if name != "nbdurable" and not name.startswith("nbdurable."):
            continue
        module = sys.modules.pop(name)
        parent, _, child = name.rpartition(".")
        if parent in sys.modules and getattr(sys.modules[parent], child, None) is module:
            delattr(sys.modules[parent], child)


results = {}
for name in sys.argv[1:]:
    forget_since_baseline()
    try:
        importlib.import_module(name)
    except BaseException as exc:
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        results[name] = {
            "missing": missing,
            "error": "".join(traceback.format_exception(exc)[-6:]),
        }
    else:
        results[name] = None
print(json.dumps(results))
"""


def module_names() -> list[str]:
    """Every module of the package but those that run a program when imported."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return [name for name in names if name not in NOT_IMPORTED]


MODULES = module_names()


@pytest.fixture(scope="module")
def outcomes() -> dict[str, Any]:
    """Each module's import outcome: None, or what went wrong."""
    shares = [MODULES[i::WORKERS] for i in range(WORKERS)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE.parent), *sys.path])}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _IMPORT_EACH, *share],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for share in shares
    ]
    results: dict[str, Any] = {}
    for process in processes:
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err
        results.update(json.loads(out.splitlines()[-1]))
    return results


def test_the_package_itself_imports_in_a_fresh_interpreter() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import nbdurable"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_alone(module: str, outcomes: dict[str, Any]) -> None:
    outcome = outcomes[module]
    if outcome is None:
        return
    missing = outcome["missing"]
    if missing is not None and not missing.startswith("nbdurable"):
        pytest.skip(f"{module} needs {missing}, which is not installed (an optional extra)")
    pytest.fail(f"import {module} alone failed:\n{outcome['error']}")
