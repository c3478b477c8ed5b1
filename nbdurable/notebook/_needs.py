"""``needs(...)``: a notebook's first cell says in one line what to install (or start).

The demo notebooks use optional extras (the HTTP bridge, MCP, LangChain, Pydantic
AI, Temporal). Without this check a missing one surfaces cells later as a raw
``ModuleNotFoundError`` or a ``TypeError``; with it the first cell stops Run All
with one line naming the ``pip install`` that brings everything every notebook
needs (``nbdurable[demos]``).
"""

from __future__ import annotations

from .._errors import ConfigurationError
from .._extras import EXTRA_MODULES, installed, temporal_binary

__all__ = ["DEMOS_INSTALL", "EXTRA_MODULES", "MissingExtraError", "needs", "temporal_binary"]

DEMOS_INSTALL = "pip install 'nbdurable[demos]'"
"""The one install that brings what every demo notebook needs."""


class MissingExtraError(ConfigurationError):
    """What a notebook needs and does not have; shown by IPython as its one line."""

    def _render_traceback_(self) -> list[str]:
        # IPython prints this instead of a traceback: the message is the whole story.
        return [f"nbdurable: {self}"]


def needs(*extras: str) -> None:
    """Check that the extras a notebook uses are installed (``needs("server", "mcp")``).

    ``temporal-dev`` also needs the ``temporal`` binary (its dev server), which the
    notebook then starts.

    Raises:
        MissingExtraError: Something is missing; the message says what to install.
        ConfigurationError: An extra this check does not know.
    """
    unknown = [extra for extra in extras if extra not in EXTRA_MODULES]
    if unknown:
        raise ConfigurationError(
            f"unknown extra(s) {', '.join(unknown)}: expected some of {', '.join(EXTRA_MODULES)}"
        )
    missing = [m for extra in extras for m in EXTRA_MODULES[extra] if not installed(m)]
    if "temporal-dev" in extras and temporal_binary() is None:
        missing.append("the `temporal` binary (its dev server, which the notebook starts)")
    if missing:
        named = ", ".join(f"nbdurable[{extra}]" for extra in extras)
        raise MissingExtraError(
            f"this notebook needs {named}; missing: {', '.join(dict.fromkeys(missing))}. "
            f"Install everything the notebooks use with {DEMOS_INSTALL}, "
            "then restart the kernel."
        )
