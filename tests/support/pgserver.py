"""Start a throwaway PostgreSQL server on 127.0.0.1 for the tests (recipe: shared/TESTING.md).

The server runs as the ``postgres`` user when the tests run as root (initdb refuses
root), listens on a free port on 127.0.0.1 only, trusts local connections, and is
stopped by its data directory when the test session ends.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def find_pg_bin() -> Path | None:
    """The directory holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PgServer:
    """A running test server."""

    bin_dir: Path
    data_dir: Path
    port: int
    run_as: str | None

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _cmd(self, *args: str) -> list[str]:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.run_as:
            return ["runuser", "-u", self.run_as, "--", *command]
        return command

    def start(self) -> None:
        subprocess.run(
            self._cmd(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ),
            check=True,
            capture_output=True,
        )
        self.start_server()

    def start_server(self) -> None:
        """Start the server on its existing data directory and wait until it accepts connections."""
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data_dir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        self._pg_ctl("-o", options, "start")

    def stop_server(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data directory (``start_server`` starts it again)."""
        self._pg_ctl("-m", mode, "stop")

    def restart(self, mode: str = "fast", down_seconds: float = 0.0) -> None:
        """Restart the server the way an operator does (``pg_ctl restart -m fast``).

        Every open connection is terminated (``AdminShutdown`` for a session in a
        query, a dead socket for an idle one). With ``down_seconds`` the server
        stays stopped that long before it starts again.
        """
        if down_seconds <= 0:
            self._pg_ctl("-m", mode, "restart")
            return
        self.stop_server(mode)
        time.sleep(down_seconds)
        self.start_server()

    def _pg_ctl(self, *args: str) -> None:
        # The log file matters for restart too: without -l the server inherits
        # pg_ctl's stdout, and capture_output would wait for the server to exit.
        subprocess.run(
            self._cmd(
                "pg_ctl",
                "-D",
                str(self.data_dir),
                "-w",
                "-t",
                "60",
                "-l",
                str(self.data_dir / "server.log"),
                *args,
            ),
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        subprocess.run(
            self._cmd("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop"),
            capture_output=True,
        )
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


def start_server() -> PgServer:
    """Start a server; raise RuntimeError when PostgreSQL is not installed."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
    root = Path(tempfile.mkdtemp(prefix="nbdurable-pg-"))
    data_dir = root / "data"
    run_as = None
    if os.geteuid() == 0:
        run_as = "postgres"
        os.chmod(root, 0o777)
        data_dir.mkdir()
        shutil.chown(data_dir, user="postgres")
    server = PgServer(bin_dir=bin_dir, data_dir=data_dir, port=_free_port(), run_as=run_as)
    server.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", server.port)) == 0:
                return server
        time.sleep(0.1)
    server.stop()
    raise RuntimeError("PostgreSQL did not start listening in 30 s")
