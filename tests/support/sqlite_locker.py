"""Another process holding a SQLite database's write lock (what a busy store looks like)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
