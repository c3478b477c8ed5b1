"""The package's optional extras: which modules each brings, and a missing one in one line.

One place for what ``pyproject.toml``'s extras install, so a command, a notebook's
first cell and the Temporal dev server all say the same ``pip install`` line.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

from ._errors import ConfigurationError

__all__ = ["EXTRA_MODULES", "import_for", "installed", "require", "temporal_binary"]

EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "notebook": ("ipywidgets", "anywidget", "pandas", "matplotlib"),
    "inspect": ("pandas", "matplotlib"),
    "server": ("fastapi", "uvicorn"),
    "ag-ui": ("ag_ui",),
    "mcp": ("mcp",),
    "langchain": ("langchain_core",),
    "pydantic-ai": ("pydantic_ai",),
    "openai-agents": ("agents",),
    "temporal": ("temporalio",),
    "temporal-dev": ("temporalio",),
    "restate": ("restate", "hypercorn"),
    "postgres": ("psycopg", "psycopg_pool"),
    "metrics": ("prometheus_client",),
    "otel": ("opentelemetry",),
}
"""The modules each extra of ``pyproject.toml`` installs (one per distribution)."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a None in sys.modules
        return False


def import_for(extra: str, what: str, module: str) -> ModuleType:
    """Import ``module``, which ``nbdurable[extra]`` installs, for ``what``.

    Raises:
        ConfigurationError: It is not installed; the message gives the
            ``pip install 'nbdurable[extra]'`` line.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"{what} needs the {extra} extra: pip install 'nbdurable[{extra}]' ({exc})"
        ) from exc


def require(extra: str, command: str) -> None:
    """Import the modules of ``nbdurable[extra]`` before ``command`` does any work.

    Raises:
        ConfigurationError: One of them is not installed (see :func:`import_for`).
    """
    for name in EXTRA_MODULES[extra]:
        import_for(extra, command, name)


def temporal_binary() -> str | None:
    """The ``temporal`` CLI: beside this Python (the ``temporal-dev`` extra), else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")
