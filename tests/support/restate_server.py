"""The ``restate_server`` fixture: one ``restate-server`` per session (per xdist worker).

Like ``temporal_server``: free 127.0.0.1 ports, a temporary base dir, stopped by
PID at the end. Test modules that use it import it by name (``from
support.restate_server import restate_server``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nbdurable.restate._devserver import RestateServer, restate_binary

__all__ = ["restate_server"]


@pytest.fixture(scope="session")
def restate_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestateServer]:
    """A ``restate-server`` on free ports with a base dir of its own; skipped without it."""
    pytest.importorskip("restate", reason="the restate extra is not installed")
    if restate_binary() is None:
        pytest.skip(
            "the `restate-server` binary is missing: npm install -g @restatedev/restate-server"
        )
    with RestateServer(tmp_path_factory.mktemp("restate")) as server:
        yield server
