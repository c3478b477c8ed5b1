"""A package's attributes imported on first use, so importing the package stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, modules: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``name`` from the module ``modules[name]``, imported when asked.

    A module name starting with a dot is relative to ``package`` (the package's ``__name__``).
    """

    def attribute(name: str) -> Any:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(modules[name], package), name)

    return attribute
