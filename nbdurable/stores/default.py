"""The default store of the notebook and the CLI."""

from __future__ import annotations

__all__ = ["DEFAULT_STORE"]

DEFAULT_STORE = "sqlite:///.nbdurable/runs.db"
"""SQLite in ``.nbdurable/`` under the working directory."""
