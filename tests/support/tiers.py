"""The test tiers: which markers a collected test gets, decided in one place.

``tests/conftest.py`` marks every test with what it needs beyond this interpreter, so
``-m`` selects a tier and a plain ``pytest`` runs the fast one (pyproject.toml's
``addopts`` deselects :data:`TIERS`). The rules read what a test is, not where it was
once written, so a test keeps its tier when it moves to another file:

- its directory (``tests/temporal/``, ``tests/browser/``);
- the fixtures it uses, directly or through other fixtures (``pg_database``, ...);
- its parameter ids (``[postgres]``: a store picked at run time);
- what its code reaches: the test function, its fixtures, and every function or class
  defined under ``tests/`` that they name, followed transitively; a name such as
  ``subprocess`` or ``nbclient`` in any of them gives the tier (:data:`BY_NAME`);
- an explicit ``@pytest.mark.slow`` or ``serial``, for what no rule can see (a test
  that is in-process but seconds long, or one that measures time).
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from nbdurable._extras import EXTRA_MODULES

TIERS = ("postgres", "temporal", "browser", "notebook", "process", "slow", "serial")
"""The markers a plain ``pytest`` deselects."""

TESTS = Path(__file__).resolve().parent.parent

BY_DIRECTORY = {"temporal": "temporal", "browser": "browser", "restate": "process"}
"""A directory under tests/ whose every test needs one service."""

BY_FIXTURE = {
    "pg_server": "postgres",
    "pg_database": "postgres",
    "temporal_server": "temporal",
    "restate_server": "process",  # restate-server and SDK endpoints: processes
    "browser": "browser",
    "jupyter": "browser",
    "voila_server": "browser",
}
"""Fixtures (direct or through other fixtures) that start a service."""

BY_PARAMETER = {"postgres": "postgres"}
"""A parameter id (``test_x[postgres]``) that picks a service at run time
(``request.getfixturevalue("pg_database")``)."""

BY_NAME = {
    # a child process: the CLI, a worker, a harness, a server in its own interpreter
    "process": {
        "subprocess",
        "Popen",
        "create_subprocess_exec",
        "create_subprocess_shell",
        "multiprocessing",
        "fork",
        "executable",  # sys.executable: a command line of this interpreter
    },
    # the postgres extra (its tests need the server or at least the driver)
    "postgres": {"psycopg", "psycopg_pool"},
    # a real kernel
    "notebook": {"nbclient", "NotebookClient", "KernelManager", "jupyter_client"},
    # latency through a delaying proxy: the test times round trips
    "serial": {"delaying_proxy"},
    # Chromium through Playwright
    "browser": {"playwright", "sync_playwright", "async_playwright"},
}
"""Names (globals, attributes or imports) whose use in reached code gives a tier."""

EXTRA_OF = {
    "postgres": ("psycopg", "the postgres extra"),
    "temporal": ("temporalio", "the temporal extra"),
    "browser": ("playwright", "playwright (the test dependency group)"),
    "notebook": ("nbclient", "nbclient (the test dependency group)"),
}
"""The module each tier's tests need: without it they skip, saying which to install."""

OPTIONAL_MODULES = frozenset(
    {module for modules in EXTRA_MODULES.values() for module in modules}
    | {
        # extras whose SDKs _extras does not list, and what they bring
        "openai", "anthropic", "httpx", "mcp_types", "starlette", "anyio",
        # the test dependency group
        "httpx_sse", "schemathesis", "nbclient", "nbformat", "playwright", "voila",
        "notebook", "jupyterlab", "langchain_openai", "ipykernel", "IPython", "nest_asyncio2",
    }
)  # fmt: skip
"""Modules a test module may import that a plain ``pip install nbdurable`` lacks: a
module (or directory) whose import stops at one of them is skipped, not an error."""

_NOT_FOUND = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")


def skipped_for_a_missing_module(report: pytest.CollectReport) -> bool:
    """Turn a failed collection that only lacks an optional module into a skip."""
    if not report.failed:
        return False
    found = _NOT_FOUND.search(str(report.longrepr))
    if found is None or found.group(1).split(".")[0] not in OPTIONAL_MODULES:
        return False
    module = found.group(1).split(".")[0]
    report.outcome = "skipped"
    report.longrepr = (str(report.fspath), 0, f"Skipped: {module} is not installed")
    return True


BY_HELPER = {("support.pgserver", "start_server"): "postgres"}
"""Helpers under tests/ that start a service of the test's own."""

BY_STRING = {
    "browser": re.compile(r"^playwright\b"),
    "notebook": re.compile(r"^nbclient\b"),
    "postgres": re.compile(r"^pg_(?:database|server)$"),
    "temporal": re.compile(r"^temporal_server$"),
    "process": re.compile(r"^restate_server$"),
}
"""Modules and fixtures named in strings (``pytest.importorskip("playwright.sync_api")``,
``request.getfixturevalue("pg_database")``)."""


def missing_extra(tiers: set[str]) -> str | None:
    """Why a test of ``tiers`` cannot run here (a package it needs is absent), or None."""
    for tier in sorted(tiers & EXTRA_OF.keys()):
        module, extra = EXTRA_OF[tier]
        if not _importable(module):
            return f"{extra} is not installed ({module})"
    return None


def skip_without(module: str, reason: str | None = None) -> None:
    """Skip the calling test module where ``module`` is not installed, without importing it.

    ``pytest.importorskip`` at a module's top imports the framework in every pytest
    process that collects the module, whether it runs its tests or not (anthropic:
    over a second of CPU); the tests import it when they run.
    """
    if not _importable(module):
        pytest.skip(reason or f"{module} is not installed", allow_module_level=True)


@cache
def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def tiers_of(item: pytest.Item) -> set[str]:
    """The tiers of one collected test (empty: the fast tier)."""
    found = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
    try:
        parts = Path(str(item.path)).resolve().relative_to(TESTS).parts
    except ValueError:
        parts = ()
    if parts and parts[0] in BY_DIRECTORY:
        found.add(BY_DIRECTORY[parts[0]])
    found.update(
        BY_FIXTURE[name] for name in getattr(item, "fixturenames", ()) if name in BY_FIXTURE
    )
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        found.update(
            BY_PARAMETER[p] for p in re.split(r"[-\[\]]", callspec.id) if p in BY_PARAMETER
        )
    roots: list[Any] = []
    function = getattr(item, "function", None)
    if function is not None:
        roots.append(function)
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for fixturedef in info.name2fixturedefs.get(name, ()) if info is not None else ():
            if _under_tests(fixturedef.func):
                roots.append(fixturedef.func)
    for root in roots:
        found |= _reached_tiers(root)
    return found


_DONE: dict[int, frozenset[str]] = {}
_KEEP: list[Any] = []  # the objects whose ids key _DONE stay alive


def _reached_tiers(obj: Any) -> frozenset[str]:
    """The tiers of what ``obj`` (a function or class defined under tests/) reaches."""
    key = id(obj)
    if key in _DONE:
        return _DONE[key]
    _DONE[key] = frozenset()  # a cycle reads as nothing more; the first visit completes it
    _KEEP.append(obj)
    found: set[str] = set()
    helper = (getattr(obj, "__module__", ""), getattr(obj, "__name__", ""))
    if helper in BY_HELPER:
        found.add(BY_HELPER[helper])
    for function in _functions_of(obj):
        names, strings = _code_names(function.__code__)
        found.update(tier for tier, words in BY_NAME.items() if names & words)
        found.update(t for t, p in BY_STRING.items() if any(p.search(s) for s in strings))
        namespace = function.__globals__
        for name in names:
            target = namespace.get(name)
            if isinstance(target, types.ModuleType):
                if _under_tests(target):
                    for attribute in names:
                        member = getattr(target, attribute, None)
                        if member is not None and _under_tests(member):
                            found |= _reached_tiers(member)
            elif target is not None and _under_tests(target):
                found |= _reached_tiers(target)
    result = frozenset(found)
    _DONE[key] = result
    return result


def _functions_of(obj: Any) -> list[types.FunctionType]:
    obj = getattr(obj, "__wrapped__", obj)  # fixtures and decorated helpers
    if isinstance(obj, types.FunctionType):
        return [obj]
    if isinstance(obj, type):
        functions: list[types.FunctionType] = []
        for value in vars(obj).values():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            elif isinstance(value, property):
                value = value.fget
            if isinstance(value, types.FunctionType):
                functions.append(value)
        return functions
    return []


def _code_names(code: types.CodeType) -> tuple[set[str], list[str]]:
    names = set(code.co_names)
    strings: list[str] = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner, inner_strings = _code_names(const)
            names |= inner
            strings += inner_strings
        elif isinstance(const, str):
            strings.append(const)
    return names, strings


def _under_tests(obj: Any) -> bool:
    """Whether ``obj`` (a function, class or module) is defined in a file under tests/."""
    if isinstance(obj, types.ModuleType):
        file = getattr(obj, "__file__", None)
    else:
        if not isinstance(obj, (types.FunctionType, type)) and not hasattr(obj, "__wrapped__"):
            return False
        module = sys.modules.get(getattr(obj, "__module__", "") or "")
        file = getattr(module, "__file__", None) if module is not None else None
    return bool(file) and _file_under_tests(str(file))


@cache
def _file_under_tests(file: str) -> bool:
    return Path(file).resolve().is_relative_to(TESTS)
