"""The reference MCP server (``@modelcontextprotocol/server-everything``, the TypeScript
SDK's) over streamable HTTP, installed with npm into a cache directory on first use.

It listens on every interface and has no host setting, so node preloads
``loopback.cjs`` (every listening socket bound to 127.0.0.1).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PACKAGE = "@modelcontextprotocol/server-everything"
VERSION = "2026.8.31"  # pinned: its answers (400 for an unknown session) are what the tests expect


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nbdurable-tests" / f"server-everything-{VERSION}"


def entry_point() -> Path:
    """The server's script, installed with npm when missing (skips without npm)."""
    target = cache_dir()
    script = target / "node_modules" / PACKAGE / "dist" / "index.js"
    if script.exists():
        return script
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip("the reference MCP server needs node and npm")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".install-"))
    done = subprocess.run(
        [
            npm,
            "install",
            "--no-audit",
            "--no-fund",
            "--prefix",
            str(staging),
            f"{PACKAGE}@{VERSION}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"npm install {PACKAGE}@{VERSION} failed:\n{done.stderr}")
    try:
        staging.rename(target)  # atomic: a concurrent install that won leaves its copy
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    assert script.exists(), script
    return script


@dataclass
class EverythingServer:
    """The reference server's process on 127.0.0.1:port, restartable on the same port."""

    port: int
    script: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["node", "--require", str(HERE / "loopback.cjs"), str(self.script), "streamableHttp"],
            env={**os.environ, "PORT": str(self.port)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the reference MCP server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
