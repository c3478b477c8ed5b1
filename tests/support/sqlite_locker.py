"""Another process holding a SQLite database's write lock (what a busy store looks like)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbdurable as nd

_HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


def hold_write_lock(path: Path | str, seconds: float) -> subprocess.Popen[str]:
    """Start a process that takes the write lock of ``path`` and keeps it ``seconds`` seconds.

    Returns once the lock is held; every other writer gets SQLITE_BUSY until then.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "locked":
        proc.kill()
        raise RuntimeError(f"the lock holder did not start: {line!r}")
    return proc


class LockAtCall:
    """A ``probe(i)`` tool that, at call ``at``, has another process hold the file's write lock.

    ``holder`` is that process (None before), ``locked_at`` the loop time the lock was held.
    """

    def __init__(
        self, path: Path | str, seconds: float, result: Callable[[int], str], at: int = 2
    ) -> None:
        self.holder: subprocess.Popen[str] | None = None
        self.locked_at = 0.0

        @nd.tool
        async def probe(i: int) -> str:
            """Probe; at one call another process takes the store's write lock for a while."""
            if i == at and self.holder is None:
                self.holder = await asyncio.to_thread(hold_write_lock, path, seconds)
                self.locked_at = asyncio.get_running_loop().time()
            return result(i)

        self.tool = probe
