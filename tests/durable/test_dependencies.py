"""The durable package stands alone: the standard library and pydantic, no store or database."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nbdurable as nd

DURABLE_DIR = Path(nd.__file__).parent / "durable"
PYDANTIC_FAMILY = {
    "pydantic",
    "pydantic_core",
    "typing_extensions",
    "annotated_types",
    "typing_inspection",
}
FORBIDDEN = {
    "sqlite3",
    "_sqlite3",
    "sqlite_utils",
    "aiosqlite",
    "psycopg",
    "psycopg2",
    "psycopg_pool",
    "asyncpg",
    "sqlalchemy",
    "dbm",
    "shelve",
    "IPython",
    "ipywidgets",
    "pandas",
    "temporalio",
    "httpx",
    "requests",
    "aiohttp",
}


def _module_imports(path: Path, package: str) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
    return names


def _module_name(path: Path) -> str:
    """``nbdurable.durable.a.b`` for ``durable/a/b.py`` (a package by its ``__init__``)."""
    parts = ["nbdurable", "durable", *path.relative_to(DURABLE_DIR).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _nbdurable_module_path(name: str) -> Path | None:
    root = Path(nd.__file__).parent.parent
    candidate = root.joinpath(*name.split("."))
    if candidate.with_suffix(".py").exists():
        return candidate.with_suffix(".py")
    if (candidate / "__init__.py").exists():
        return candidate / "__init__.py"
    return None


@pytest.mark.spec("S000-64")
def test_durable_package_imports_only_stdlib_pydantic_and_nbdurable() -> None:
    """nbdurable.durable, nbdurable.runs and every nbdurable module they reach import only the
    standard library, pydantic and nbdurable; no file/SQLite store or database driver."""
    files = sorted(DURABLE_DIR.rglob("*.py"))
    names = {f.relative_to(DURABLE_DIR).as_posix() for f in files}
    assert names >= {"_signer.py", "_checkpoint.py", "_codec.py", "store/__init__.py"}
    queue = [(f, _module_name(f)) for f in files]
    # the run records (nbdurable.runs) share the durable layer and its dependencies
    queue += [
        (f, "nbdurable.runs" if f.name == "__init__.py" else f"nbdurable.runs.{f.stem}")
        for f in sorted((DURABLE_DIR.parent / "runs").glob("*.py"))
    ]
    seen: set[str] = set()
    reached: set[str] = set()
    while queue:
        path, module = queue.pop()
        if module in seen:
            continue
        seen.add(module)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for name in _module_imports(path, package):
            top = name.split(".")[0]
            if top == "__future__":
                continue
            assert top not in FORBIDDEN, f"{module} imports {name}"
            if top == "nbdurable":
                assert not name.startswith(("nbdurable.stores", "nbdurable.notebook")), (
                    f"{module} imports {name}"
                )
                reached.add(name)
                target = _nbdurable_module_path(name)
                if target is not None:
                    queue.append((target, name))
                continue
            assert top in sys.stdlib_module_names or top in PYDANTIC_FAMILY, (
                f"{module} imports third-party {name}"
            )
    # the signer really is built on the standard library's HMAC
    signer_imports = _module_imports(DURABLE_DIR / "_signer.py", "nbdurable.durable")
    assert {"hmac", "hashlib", "base64", "json"} <= signer_imports


@pytest.mark.spec("S000-64")
def test_importing_durable_loads_no_store_or_database_module() -> None:
    """Importing nbdurable.durable on its own loads no sqlite, driver or store code."""
    code = f"""
import importlib, json, sys, types
import pydantic  # the one allowed third-party dependency, loaded first as a baseline
baseline = set(sys.modules)
pkg = types.ModuleType("nbdurable")  # import the subpackage without the top-level package
pkg.__path__ = [{str(DURABLE_DIR.parent)!r}]
sys.modules["nbdurable"] = pkg
mod = importlib.import_module("nbdurable.durable")
assert hasattr(mod, "ApprovalSigner") and hasattr(mod, "serialize_checkpoint")
print(json.dumps(sorted(set(sys.modules) - baseline)))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        # pydantic plugins off: where logfire is installed, its plugin loads requests
        # and OpenTelemetry with the first model, whatever nbdurable imports
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYDANTIC_DISABLE_PLUGINS": "__all__"},
    )
    loaded = json.loads(out.stdout)
    tops = {name.split(".")[0] for name in loaded}
    assert tops & FORBIDDEN == set()
    assert not [n for n in loaded if n.startswith(("nbdurable.stores", "nbdurable.notebook"))]
    third_party = {
        t
        for t in tops
        if t not in sys.stdlib_module_names
        and t not in PYDANTIC_FAMILY
        and t != "nbdurable"
        and not t.startswith("_")
    }
    assert third_party == set()
    assert "nbdurable.durable._signer" in loaded
