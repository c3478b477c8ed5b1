"""No module of the package reaches into another module's private names.

A name with one leading underscore belongs to the module that defines it. Other modules
use the public name instead, so a private helper can change without breaking a caller
it never knew about. Private *modules* (``nbdurable._errors``) are private to the
package, not to themselves: any module of the package may import their public names.

Four shapes are checked: ``from x import _name``, ``module._name`` on an imported
module, ``obj._name`` on any other object when the checking module does not itself
define ``_name`` (as a function, a class attribute or a ``self._name`` assignment), and
the same reach spelled as a string: ``getattr(obj, "_name")`` (or ``hasattr``,
``setattr``, ``delattr``) under the same rule.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import nbdurable

PACKAGE = Path(nbdurable.__file__).parent

# Private names of other libraries' public protocols, used as their documentation says.
FOREIGN_PROTOCOL = frozenset(
    {
        "_asdict",  # namedtuple
        "_replace",  # namedtuple
        "_fields",  # namedtuple
        "_repr_html_",  # IPython's rich display protocol
        "_repr_mimebundle_",  # IPython's rich display protocol
        "_ipython_display_",  # IPython's rich display protocol
        "_abc_impl",  # set by ABCMeta on every abstract class
        "_actions",  # argparse: a parser's arguments, which it has no public accessor for
        "_exit",  # os._exit: documented, the exit that skips cleanup handlers
        "_get_ls_params",  # LangChain chat models' provider/model names; no public twin
        "_ready",  # asyncio: a loop's ready queue, refilled after a nested run (nbdurable._sync)
    }
)

# Private names of other libraries read by ``getattr`` with a default: each is probed
# because the library offers no public way to ask, and its absence is tolerated.
FOREIGN_PROBED = frozenset(
    {
        "_shell_context",  # ipykernel: the contextvars context the shell runs cells in
        "_dispatcher",  # mcp: a client session's transport dispatcher
        "_closed",  # mcp: whether that dispatcher's stream is closed
        "_llm_type",  # LangChain: a chat model's provider name, for labels
        "_nest_patched",  # nest_asyncio: marks a loop it patched
    }
)
REFLECTION = frozenset({"getattr", "hasattr", "setattr", "delattr"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_"


def _defined_here(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _defined_here(tree)
    modules: set[str] = set()
    found: list[str] = []
    rel = path.relative_to(PACKAGE.parent)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _private(alias.name) and not _is_module(node, alias.name, path):
                    found.append(f"{rel}:{node.lineno}: imports {alias.name}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        if node.attr in FOREIGN_PROTOCOL:
            continue
        receiver = node.value
        if isinstance(receiver, ast.Name) and receiver.id in {"self", "cls"}:
            continue
        if _is_super(receiver):
            # Overriding a base class's private method couples to its internals just
            # as calling it does, unless the base is a class of this very module.
            if node.attr not in _methods_of_other_classes(tree, node):
                found.append(f"{rel}:{node.lineno}: super().{node.attr}")
            continue
        if isinstance(receiver, ast.Name) and receiver.id in modules:
            found.append(f"{rel}:{node.lineno}: {receiver.id}.{node.attr}")
        elif node.attr not in here:
            found.append(f"{rel}:{node.lineno}: {ast.unparse(receiver)}.{node.attr}")
    found += _reflected(tree, here, rel)
    return found


def _reflected(tree: ast.Module, here: set[str], rel: Path) -> list[str]:
    """``getattr(obj, "_name")`` and its kin: a private name reached through a string."""
    found: list[str] = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in REFLECTION
            and len(node.args) >= 2
        ):
            continue
        name = node.args[1]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            continue
        attr = name.value
        if not _private(attr) or attr in FOREIGN_PROTOCOL or attr in FOREIGN_PROBED:
            continue
        receiver = node.args[0]
        if isinstance(receiver, ast.Name) and receiver.id in {"self", "cls"}:
            continue
        if attr not in here:
            found.append(f"{rel}:{node.lineno}: {node.func.id}({ast.unparse(receiver)}, {attr!r})")
    return found


def _is_super(receiver: ast.expr) -> bool:
    return (
        isinstance(receiver, ast.Call)
        and isinstance(receiver.func, ast.Name)
        and receiver.func.id == "super"
    )


def _methods_of_other_classes(tree: ast.Module, inside: ast.AST) -> set[str]:
    """Methods of the module's classes other than the one enclosing ``inside``."""
    names: set[str] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if any(child is inside for child in ast.walk(cls)):
            continue
        names.update(
            f.name for f in cls.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        )
    return names


def _is_module(node: ast.ImportFrom, name: str, path: Path) -> bool:
    """Whether ``from ... import name`` imports a submodule (a private module is fine)."""
    base = path.parent
    for _ in range(max(node.level - 1, 0)):
        base = base.parent
    if node.level == 0:
        if not (node.module or "").startswith("nbdurable"):
            return False
        base = PACKAGE.parent
    for part in (node.module or "").split(".") if node.module else ():
        base = base / part
    return (base / f"{name}.py").exists() or (base / name / "__init__.py").exists()


def test_no_module_uses_another_modules_private_names() -> None:
    found = [v for path in sorted(PACKAGE.rglob("*.py")) for v in _violations(path)]
    assert found == [], "private names used outside their module:\n" + "\n".join(found)


def _package_classes() -> list[type]:
    classes: list[type] = []
    for info in pkgutil.walk_packages(nbdurable.__path__, "nbdurable."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as missing:  # every module is checked, or none
            pytest.skip(f"{info.name} needs {missing.name}, which is not installed")
        classes.extend(
            obj
            for obj in vars(module).values()
            if isinstance(obj, type) and obj.__module__ == module.__name__
        )
    return classes


def test_no_class_overrides_a_private_method_of_another_modules_class() -> None:
    found = []
    for cls in _package_classes():
        for name in vars(cls):
            if not _private(name) or name in FOREIGN_PROTOCOL:
                continue
            for base in cls.__mro__[1:]:
                if (
                    name in vars(base)
                    and base.__module__.startswith("nbdurable.")
                    and base.__module__ != cls.__module__
                ):
                    found.append(
                        f"{cls.__module__}.{cls.__qualname__}.{name} overrides {base.__module__}.{base.__qualname__}.{name}"
                    )
                    break
    assert found == [], "private methods overridden across modules:\n" + "\n".join(found)
