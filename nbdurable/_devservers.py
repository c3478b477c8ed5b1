"""Local server processes for tests, benchmarks and demos: free ports, ready checks, stops by PID.

What the Temporal dev server (:mod:`nbdurable.temporal._devserver`) and a local
``restate-server`` (:mod:`nbdurable.restate._devserver`) share: both start a
binary on free 127.0.0.1 ports, wait until it answers, and stop it by its
process id. Standard library only, so neither engine's SDK is imported for it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

__all__ = ["LocalServer", "free_port", "stop_process", "wait_until_ready"]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM by PID, then SIGKILL after ``timeout`` seconds."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def wait_until_ready(
    proc: subprocess.Popen[Any], ready: Callable[[], bool], timeout: float, failed: Exception
) -> None:
    """Return once ``ready()``; stop ``proc`` and raise ``failed`` when it exits or time is up.

    Raises:
        Exception: ``failed``.
    """
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline or proc.poll() is not None:
            stop_process(proc)
            raise failed
        time.sleep(0.2)


class LocalServer(ABC):
    """A server process started by :meth:`start` and stopped by PID; a context manager."""

    proc: subprocess.Popen[Any] | None = None

    @abstractmethod
    def start(self) -> Any:
        """Start the server and wait until it answers."""

    def stop(self) -> None:
        """Stop the server by PID."""
        if self.proc is not None:
            stop_process(self.proc)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
