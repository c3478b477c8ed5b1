"""The run-record package shows one face: its ``__all__`` is every public name of its modules."""

from __future__ import annotations

import ast
from pathlib import Path

import nbdurable.runs as runs

RUNS_DIR = Path(runs.__file__).parent


def _exported(path: Path) -> list[str]:
    """The ``__all__`` a module declares."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{path.name} declares no __all__")


def test_modules_are_private() -> None:
    modules = sorted(p.name for p in RUNS_DIR.glob("*.py"))
    assert modules[0] == "__init__.py"
    assert all(name.startswith("_") for name in modules)


def test_all_is_every_public_name_of_its_modules() -> None:
    declared = [
        name
        for path in sorted(RUNS_DIR.glob("_*.py"))
        if path.name != "__init__.py"
        for name in _exported(path)
    ]
    assert len(declared) == len(set(declared)), "two modules export one name"
    assert sorted(runs.__all__) == sorted(declared)
    assert len(runs.__all__) == len(set(runs.__all__))
    for name in runs.__all__:
        assert getattr(runs, name) is not None, name


def test_public_names_stay_where_they_were() -> None:
    import nbdurable
    import nbdurable.runtime as runtime

    for name in ("RuntimeRun", "ToolIntent", "LateResult"):
        assert getattr(runtime, name) is getattr(runs, name)
    assert nbdurable.runtime.RuntimeRun is runs.RuntimeRun
