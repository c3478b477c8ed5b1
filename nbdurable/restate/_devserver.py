"""A local ``restate-server`` for tests, benchmarks and demos: free ports, a base dir of its own.

Not for production (a Restate cluster is): one node on 127.0.0.1, its state under
``base_dir``. Several can run side by side (one per pytest-xdist worker): each
gets free ingress, admin and node-to-node ports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from .._devservers import LocalServer, free_port, stop_process, wait_until_ready
from ._admin import answers
from ._errors import RestateUnavailableError

__all__ = ["RestateServer", "free_port", "restate_binary", "start_endpoint", "stop_process"]

INSTALL = "npm install -g @restatedev/restate-server"


def restate_binary() -> str | None:
    """The ``restate-server`` executable on PATH, or None."""
    return shutil.which("restate-server")


class RestateServer(LocalServer):
    """``restate-server`` on free 127.0.0.1 ports, ready once its admin API answers.

    Use as a context manager, or call :meth:`start` and :meth:`stop`.

    Args:
        base_dir: Where the server keeps its state (a started-again server resumes it).
        startup_timeout: Seconds to wait for its admin API.
    """

    def __init__(self, base_dir: str | os.PathLike[str], *, startup_timeout: float = 60) -> None:
        self.base_dir = Path(base_dir)
        self.startup_timeout = startup_timeout
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen[Any] | None = None

    @property
    def ingress(self) -> str:
        """The ingress URL (``http://127.0.0.1:port``): where invocations are sent."""
        return f"http://127.0.0.1:{self.ports['ingress']}"

    @property
    def admin(self) -> str:
        """The admin API URL: where deployments are registered."""
        return f"http://127.0.0.1:{self.ports['admin']}"

    def _config(self) -> Path:
        # Few partitions start fast; quick retries find a restarted endpoint soon.
        config = self.base_dir / "restate.toml"
        config.write_text(
            f"""node-name = "nbdurable"
base-dir = "{self.base_dir / "data"}"
default-num-partitions = 2
disable-telemetry = true
log-filter = "error"
log-format = "compact"
bind-address = "127.0.0.1:{self.ports["node"]}"

[default-retry-policy]
initial-interval = "100ms"
exponentiation-factor = 2.0
max-interval = "2s"
max-attempts = "unlimited"

[worker.invoker]
inactivity-timeout = "10s"
abort-timeout = "30s"

[ingress]
bind-address = "127.0.0.1:{self.ports["ingress"]}"

[admin]
bind-address = "127.0.0.1:{self.ports["admin"]}"
disable-web-ui = true
"""
        )
        return config

    def start(self) -> RestateServer:
        """Start the server (again, on the same ports) and wait until its admin API answers.

        Raises:
            RestateUnavailableError: ``restate-server`` is missing, or did not start in time.
        """
        binary = restate_binary()
        if binary is None:
            raise RestateUnavailableError(f"the `restate-server` binary is missing: {INSTALL}")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if not self.ports:
            self.ports = {name: free_port() for name in ("ingress", "admin", "node")}
        command = [binary, "--no-logo", "--listen-mode", "tcp", "-c", str(self._config())]
        with open(self.base_dir / "server.log", "ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

        def ready() -> bool:
            return answers(self.admin) and answers(f"{self.ingress}/restate")

        failed = RestateUnavailableError(
            f"restate-server did not start (log: {self.base_dir / 'server.log'})"
        )
        wait_until_ready(self.proc, ready, self.startup_timeout, failed)
        return self


def start_endpoint(
    server: RestateServer,
    store_url: str,
    agents: str,
    listen: str,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    """Start ``nbdurable worker --engine restate`` serving ``agents`` (``module:attr``).

    Returns once its deployment is registered (its first line says so); its
    output stays on the returned process's ``stdout``.

    Raises:
        RestateUnavailableError: It exited instead (its first line says why).
    """
    command = ["-m", "nbdurable.cli", "worker", "--engine", "restate", "--listen", listen]
    command += ["--ingress", server.ingress, "--admin", server.admin]
    command += ["--store", store_url, "--agents", agents]
    proc = subprocess.Popen(
        [sys.executable, *command],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if "serving" not in line:
        stop_process(proc)
        raise RestateUnavailableError(f"the Restate endpoint did not start: {line}")
    return proc
