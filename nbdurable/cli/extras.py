"""Optional extras a command needs: a missing one is one line naming its ``pip install``."""

from __future__ import annotations

import importlib

from .._errors import ConfigurationError

__all__ = ["require"]


def require(extra: str, command: str, *modules: str) -> None:
    """Import ``modules`` (those of ``nbdurable[extra]``) before ``command`` does any work.

    Raises:
        ConfigurationError: One of them is not installed; the message gives the
            ``pip install 'nbdurable[extra]'`` line, as the postgres, metrics and MCP
            paths do.
    """
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise ConfigurationError(
                f"{command} needs the {extra} extra: pip install 'nbdurable[{extra}]' ({exc})"
            ) from None
