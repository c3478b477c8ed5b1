"""Where the widgets' front-end files (ESM and CSS) are: ``static/`` beside this module.

They ship inside the package (package data, the anywidget convention), so a
wheel, an editable install and a source checkout all find them in the same place.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "SHARED_MODULES",
    "SHARED_STYLES",
    "STATIC",
    "frontend_file",
    "view_module",
    "view_style",
]

STATIC = Path(__file__).resolve().parent / "static"
"""The folder of the front-end files."""


def frontend_file(name: str) -> Path:
    """The path of front-end file ``name`` (``run_view.js``, ``run_view.css``).

    Raises:
        FileNotFoundError: The package has no such file.
    """
    path = STATIC / name
    if not path.is_file():
        raise FileNotFoundError(f"nbdurable widget file {name!r} not found in {STATIC}")
    return path


SHARED_MODULES = ("kernel_link.js", "verdict_forms.js")
"""Put before every view's module: the kernel link, the Edit and Reply forms."""
SHARED_STYLES = ("theme.css", "verdict_forms.css")
"""Put before every view's stylesheet: the palette, the Edit and Reply forms."""


def view_module(name: str) -> str:
    """The ESM of view ``name`` with the shared helpers (:data:`SHARED_MODULES`) before it.

    Every view judges whether its kernel is still there the same way (the
    helper's ``kernelLink`` is in scope of the view's module), and builds the
    same Edit and Reply forms (``editForm``, ``replyBox``).
    """
    parts = [frontend_file(n).read_text(encoding="utf-8") for n in (*SHARED_MODULES, name)]
    return "\n".join(parts)


def view_style(name: str) -> str:
    """The stylesheet of view ``name`` with the shared styles (:data:`SHARED_STYLES`) before it."""
    parts = [frontend_file(n).read_text(encoding="utf-8") for n in (*SHARED_STYLES, name)]
    return "\n".join(parts)
