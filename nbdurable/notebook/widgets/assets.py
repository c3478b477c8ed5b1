"""Where the widgets' front-end files (ESM and CSS) are, in a wheel or a source checkout."""

from __future__ import annotations

from pathlib import Path

__all__ = ["frontend_file", "view_module"]

_HERE = Path(__file__).resolve().parent
_CANDIDATES = (
    _HERE / "frontend",  # an installed wheel: setup.py maps widgets/ to this package
    _HERE.parents[2] / "widgets",  # an editable install or a checkout: the top-level widgets/
)


def frontend_file(name: str) -> Path:
    """The path of front-end file ``name`` (``run_view.js``, ``run_view.css``).

    Raises:
        FileNotFoundError: Neither the installed package nor the checkout has it.
    """
    for directory in _CANDIDATES:
        path = directory / name
        if path.is_file():
            return path
    searched = ", ".join(str(d) for d in _CANDIDATES)
    raise FileNotFoundError(f"nbdurable widget file {name!r} not found in {searched}")


def view_module(name: str) -> str:
    """The ESM of view ``name`` with the shared kernel link (``kernel_link.js``) before it.

    Every view judges whether its kernel is still there the same way: the
    helper's ``kernelLink`` is in scope of the view's module.
    """
    link = frontend_file("kernel_link.js").read_text(encoding="utf-8")
    return link + "\n" + frontend_file(name).read_text(encoding="utf-8")
