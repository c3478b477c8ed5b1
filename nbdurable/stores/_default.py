"""The default store of the notebook and the CLI."""

from __future__ import annotations

import os

__all__ = ["DEFAULT_STORE", "STORE_ENV_VAR", "default_store"]

DEFAULT_STORE = "sqlite:///.nbdurable/runs.db"
"""SQLite in ``.nbdurable/`` under the working directory."""

STORE_ENV_VAR = "NBDURABLE_STORE"
"""The environment variable naming the store used when none is given."""


def default_store() -> str:
    """The store used when none is given: ``NBDURABLE_STORE``, else :data:`DEFAULT_STORE`."""
    return os.environ.get(STORE_ENV_VAR) or DEFAULT_STORE
