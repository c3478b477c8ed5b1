"""Where the widgets' front-end files (ESM and CSS) are: ``static/`` beside this module.

They ship inside the package (package data, the anywidget convention), so a
wheel, an editable install and a source checkout all find them in the same place.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["STATIC", "frontend_file", "view_module", "view_style"]

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


def view_module(name: str) -> str:
    """The ESM of view ``name`` with the shared kernel link (``kernel_link.js``) before it.

    Every view judges whether its kernel is still there the same way: the
    helper's ``kernelLink`` is in scope of the view's module.
    """
    link = frontend_file("kernel_link.js").read_text(encoding="utf-8")
    return link + "\n" + frontend_file(name).read_text(encoding="utf-8")


def view_style(name: str) -> str:
    """The stylesheet of view ``name`` with the shared palette (``theme.css``) before it."""
    theme = frontend_file("theme.css").read_text(encoding="utf-8")
    return theme + "\n" + frontend_file(name).read_text(encoding="utf-8")
