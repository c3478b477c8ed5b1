"""Bridge fixtures: a real uvicorn server on 127.0.0.1 (a thread), a SQLite store per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# the bridge's tests need the server extra and an HTTP client: without them they skip
for _module in ("fastapi", "uvicorn", "httpx"):
    pytest.importorskip(_module, reason=f"{_module} is not installed (the server extra)")

from . import agents as test_agents  # noqa: E402
from .harness import Server, start_server  # noqa: E402


@pytest.fixture(autouse=True)
def _reset_flaky() -> Iterator[None]:
    test_agents.FLAKY["fail"] = True
    yield
    test_agents.FLAKY["fail"] = True


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def make(**options: Any) -> Server:
        url = options.pop("store_url", f"sqlite:///{tmp_path}/runs-{len(started)}.db")
        server = start_server(url, **options)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def server(make_server: Callable[..., Server]) -> Server:
    return make_server()
