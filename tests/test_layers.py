"""Layers that only point down: no module imports a module of a layer above its own.

The order, lowest first (architecture issue; it supersedes the layer tree in DESIGN.md)::

    _errors, _deps, messages, history, parts
      → durable (checkpoints, codec, signer, session store), runs (run records)
      → models, tools, events (event log, fork core)
      → loop
      → stores
      → inspect | runtime      (peers: neither imports the other)
      → temporal | restate     (peers: the external engines; neither imports the other)
      → notebook, server, cli, testing (the store conformance suite)

Modules the issue does not name are placed as follows:

- ``_text``, ``_media``, ``_sync``, ``_aio``, ``_gc``, ``_resources``, ``_openai_chat``,
  ``_display``, ``_version``, ``_redact``: standard-library helpers (and the OpenAI chat shape of messages)
  that ``messages`` and everything above use: the bottom layer.
- ``interop`` (LangChain and Pydantic AI tools) and ``mcp`` (MCP servers' tools):
  tool sources, beside ``tools`` (``Tool.from_langchain`` reaches into ``interop``).
- ``tracing``, ``metrics``, ``health``: the observability hooks the loop's driver
  calls (``tracing.HOOKS``, ``metrics.HOOKS``) and the probe server that serves
  the metrics: the loop's layer; ``_genai_messages`` (messages in the GenAI
  conventions' JSON, what ``tracing`` records) with them.
- ``_openai_agents`` (OpenAI Agents SDK agents as runtime ``Agent`` fields, for
  ``Agent.from_openai_agents``): the runtime's layer.
- ``nbdurable`` itself (``__init__``, the facade re-exporting everything): the top.

One module sits below its package: ``events.model`` (the event record, which
imports nothing above ``durable``) is placed in ``durable``'s layer, so the store
seam (``durable.store``, whose event log returns events) may name it.

Inside a layer imports are free, except between peers: ``inspect`` and ``runtime``
never import each other, and of the applications on top only ``cli`` imports
another (``server``, for ``nbdurable serve``).

Every import counts: at module level, deferred inside a function, and under
``if TYPE_CHECKING:`` (a type-only import is still a dependency a reader must
follow, and mypy resolves it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nbdurable"

LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "_errors",
        "_deps",
        "messages",
        "history",
        "parts",
        "_text",
        "_media",
        "_sync",
        "_aio",
        "_gc",
        "_resources",
        "_openai_chat",
        "_display",
        "_version",
        "_redact",
        "_extras",
        "_lazy",
        "_json_schema",
        "_devservers",
    ),
    ("durable", "runs"),
    ("models", "tools", "events", "interop", "mcp"),
    ("loop", "tracing", "_genai_messages", "metrics", "health"),
    ("stores",),
    ("inspect", "runtime", "_openai_agents"),
    ("temporal", "restate"),
    ("notebook", "server", "cli", "testing", ""),
)
"""Components by layer, lowest first; a component is a top-level module or
subpackage of ``nbdurable`` (``""``: the package's ``__init__``)."""

SEPARATE: frozenset[tuple[str, str]] = frozenset(
    {
        ("inspect", "runtime"),
        ("runtime", "inspect"),
        ("temporal", "restate"),
        ("restate", "temporal"),
        ("notebook", "cli"),
        ("notebook", "server"),
        ("server", "cli"),
        ("server", "notebook"),
        ("cli", "notebook"),
    }
)
"""``(importer, imported)`` pairs of one layer that must not import each other."""

LAYER_OF: dict[str, int] = {name: i for i, names in enumerate(LAYERS) for name in names}

PLACED: dict[str, str] = {"nbdurable.events._model": "durable"}
"""Modules placed in another component's layer than their package's (see the docstring)."""


@dataclass(frozen=True)
class Import:
    """One import of a package module by a package module."""

    source: str
    target: str
    line: int


def module_name(path: Path) -> str:
    """``nbdurable.a.b`` for ``nbdurable/a/b.py`` (a package by its ``__init__``)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    """Every module of the package, by name."""
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, source: str, is_package: bool, known: set[str]) -> list[Import]:
    """The package modules ``source`` (module ``name``) imports, wherever the import sits.

    ``from a import b`` imports the module ``a.b`` when there is one, else ``a``.
    """
    found: list[Import] = []
    package = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(Import(name, alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                child = f"{module}.{alias.name}"
                found.append(Import(name, child if child in known else module, node.lineno))
    mine = [i for i in found if i.target == "nbdurable" or i.target.startswith("nbdurable.")]
    return list(dict.fromkeys(mine))


def component(module: str) -> str:
    """The top-level module or subpackage of ``nbdurable`` a module belongs to."""
    if module in PLACED:
        return PLACED[module]
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def violation(imp: Import) -> str | None:
    """Why ``imp`` breaks the layer order, or None."""
    source, target = component(imp.source), component(imp.target)
    if source == target:
        return None
    if LAYER_OF[target] > LAYER_OF[source]:
        return f"points up: {source or 'nbdurable'} imports {imp.target} from a higher layer"
    if (source, target) in SEPARATE:
        return f"peers: {source} must not import {target}"
    return None


def layer_violations(modules: dict[str, Path]) -> list[str]:
    """``file:line: why`` for every import against the layer order."""
    known = set(modules)
    problems: list[str] = []
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        for imp in imports_of(name, text, path.name == "__init__.py", known):
            why = violation(imp)
            if why is not None:
                rel = path.relative_to(PACKAGE.parent)
                problems.append(f"{rel}:{imp.line}: {why}")
    return problems


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in all_modules() if component(m) not in LAYER_OF)
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


def test_no_import_points_up_or_between_peers() -> None:
    problems = layer_violations(all_modules())
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "code", "expected"),
    [
        ("nbdurable.stores.x", "from ..runtime.records import RuntimeRun", "points up"),
        ("nbdurable.durable.x", "def f():\n    from ..events import writer", "points up"),
        ("nbdurable.events._model", "from ..events import writer", "points up"),
        (
            "nbdurable.durable.x",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import nbdurable.loop",
            "points up",
        ),
        ("nbdurable.runtime.x", "from ..inspect import rewind", "peers"),
        ("nbdurable.inspect.x", "from nbdurable.runtime import _run as run", "peers"),
        ("nbdurable.notebook.x", "from ..cli._store import default_store_url", "peers"),
        ("nbdurable.mcp.x", "from .. import __version__", "points up"),
        ("nbdurable.runtime.x", "from ..durable import runs\nfrom . import engine", None),
        ("nbdurable.cli.x", "from ..server import app", None),
    ],
)
def test_the_check_sees_every_kind_of_import(module: str, code: str, expected: str | None) -> None:
    known = {*all_modules(), "nbdurable.runtime.records", "nbdurable.server._app"}
    found = [violation(i) for i in imports_of(module, code, False, known)]
    problems = [why for why in found if why is not None]
    if expected is None:
        assert not problems
    else:
        assert len(problems) == 1 and problems[0].startswith(expected), problems
